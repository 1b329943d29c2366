"""Fuzzing the container over real sockets: HTTP requests, raw bytes and WebSocket frames.

The server is the real one (the container's uvicorn set-up, protocols and app) on a thread, with the
fake engine: the property is about the HTTP and WebSocket layer, not the model. Never a 5xx, every
refusal in the contract's JSON error shape (docs/container.md#refusals), never a dropped connection
for a well-formed request, the WebSocket session goes on with error frames, and a valid request is
served afterwards.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from container_fake_server import free_port, wait_until_ready
from container_fakes import AppFactory, FakeEngine
from container_fuzzing import (
    HttpProbe,
    RawProbe,
    WsProbe,
    check_http,
    check_raw,
    check_still_serving,
    check_ws,
    http_probes,
    raw_probes,
    ws_probes,
)
from hypothesis import HealthCheck, given, settings
from starlette.testclient import TestClient
from tts_container.app import create_app
from tts_container.metrics import MetricsLog
from tts_container.server import uvicorn_config
from tts_container.settings import Settings
from tts_container.websocket import INBOX_MAX_MESSAGES
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import ClientConnection, connect

FUZZ = settings(
    deadline=None,
    database=None,
    print_blob=True,  # a failure found in CI replays with @reproduce_failure
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    engine = FakeEngine(segments=2, samples=240)
    app = create_app(
        Settings(cache_dir=Path(tmp_path_factory.mktemp("cache")), queue_max_depth=4),
        engine_factory=lambda _settings: engine,
        metrics=MetricsLog("fuzz", stream=io.StringIO()),
    )
    chosen = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=chosen, log_level="error"))
    thread = threading.Thread(target=server.run, name="fuzz-server", daemon=True)
    thread.start()
    wait_until_ready(f"http://127.0.0.1:{chosen}", thread.is_alive, 30)
    try:
        yield chosen
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture(scope="module")
def client(port: int) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as kept_alive:
        yield kept_alive


@pytest.fixture(scope="module")
def session(port: int) -> Iterator[ClientConnection]:
    url = f"ws://127.0.0.1:{port}/invocations-bidirectional-stream"
    with connect(url, open_timeout=10, max_size=None) as ws:
        yield ws


@settings(FUZZ, max_examples=1500)
@given(probe=http_probes)
def test_http_requests_never_get_a_5xx_or_a_dropped_connection(
    client: httpx.Client, probe: HttpProbe
) -> None:
    check_http(client, probe)


@settings(FUZZ, max_examples=250)
@given(probe=raw_probes)
def test_raw_bytes_get_json_4xx_answers_or_none(port: int, probe: RawProbe) -> None:
    check_raw(port, probe)


@settings(FUZZ, max_examples=800)
@given(probe=ws_probes)
def test_websocket_frames_get_error_frames_and_the_session_goes_on(
    session: ClientConnection, probe: WsProbe
) -> None:
    check_ws(session, probe)


def test_the_server_still_serves_after_the_fuzzing(
    client: httpx.Client, session: ClientConnection
) -> None:
    check_still_serving(client)
    assert check_ws(session, WsProbe("valid", json.dumps({"text": "Still here."}))) == (
        "synthesis_complete"
    )
    assert session.ping().wait(timeout=10)


@pytest.mark.parametrize(
    ("body", "outcome"),
    [
        (b'{"text": "\\udae9"}', "400 invalid_text"),
        (b'{"text": "ok \\ud800\\udc00 \\udc00"}', "400 invalid_text"),
        (b'{"text": "Hi.", "speed": ' + b"9" * 400 + b"}", "422 invalid_speed"),
        (b'{"text": "Hi.", "speed": ' + b"9" * 5000 + b"}", "422 invalid_speed"),
        (b'{"text": "Hi.", "speed": 1e999}', "422 invalid_speed"),
        (b'{"text": "Hi.", "speed": NaN}', "400 invalid_json"),
        (b"[" * 999 + b"]" * 999, "400 json_too_deep"),
        (b"[" * 100_000, "400 json_too_deep"),
        (b'{"text": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', "200"),
        (b"\xff\xfe{", "400 invalid_json"),
        (b'"' + b"a" * 100_000, "400 invalid_json"),  # unterminated: linear, not a ReDoS
        (b'"\\' * 50_000, "400 invalid_json"),
        (b'{"text": "a \\\\\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ b"}', "200"),
    ],
)
def test_the_issue_s_inputs_get_4xx_json(client: httpx.Client, body: bytes, outcome: str) -> None:
    assert check_http(client, HttpProbe("issue", body)) == outcome


def test_lone_surrogates_over_the_websocket_are_an_error_frame(session: ClientConnection) -> None:
    frame = '{"text": "\\udae9", "request_id": "sur"}'
    assert check_ws(session, WsProbe("issue", frame)) == "error invalid_text"


@pytest.mark.parametrize(
    ("data", "outcome"),
    [
        (b"GARBAGE\r\n\r\n", "400 bad_http_request"),
        (
            b"POST /invocations HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "400 bad_http_request",
        ),
        (b"GET /\xff HTTP/1.1\r\nHost: t\r\n\r\n", "400 bad_http_request"),
        (
            b"GET /invocations-bidirectional-stream HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\n",
            "400 bad_websocket_handshake",
        ),
        (
            b"GET /elsewhere HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            "403 websocket_refused",
        ),
        (
            b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\nGARBAGE\r\n\r\n",  # pipelined after a good one
            "200, 400 bad_http_request",
        ),
    ],
)
def test_protocol_errors_answer_json(port: int, data: bytes, outcome: str) -> None:
    assert check_raw(port, RawProbe("issue", data)) == outcome


def test_a_body_broken_while_the_app_reads_it_gets_json_400_and_frees_the_slot(
    port: int, client: httpx.Client
) -> None:
    head = (
        b"POST /invocations HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + b'5\r\n{"tex\r\n')  # the app is now waiting for the rest
        time.sleep(0.2)
        sock.sendall(b"not-a-chunk-size\r\n")
        sock.settimeout(5)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"] == "bad_http_request"
    deadline = time.monotonic() + 10
    while client.get("/ping").headers["x-in-flight"] != "0":
        assert time.monotonic() < deadline, "the broken request kept its slot"
        time.sleep(0.02)


def test_a_frame_over_the_size_limit_closes_1009_and_the_server_goes_on(
    port: int, client: httpx.Client
) -> None:
    url = f"ws://127.0.0.1:{port}/invocations-bidirectional-stream"
    with connect(url, open_timeout=10, max_size=None) as ws:
        ws.send("x" * (1024 * 1024 + 1))
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009
    check_still_serving(client)


def test_a_bug_is_still_a_json_error(make_app: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the server")

    monkeypatch.setattr("tts_container.app.parse_request", broken)
    app, _, _ = make_app()
    with TestClient(app, raise_server_exceptions=False) as client:
        assert app.state.tts.ready_event.wait(10)
        response = client.post("/invocations", json={"text": "Hello."})
    assert response.status_code == 500
    assert response.json() == {
        "error": "internal_error",
        "detail": "RuntimeError in the server; see its log",
    }


def test_requests_beyond_the_session_s_bound_are_refused_at_once(make_app: AppFactory) -> None:
    hold = threading.Event()
    app, _, _ = make_app(engine=FakeEngine(segments=1, hold=hold))
    with TestClient(app) as client:
        assert app.state.tts.ready_event.wait(10)
        with client.websocket_connect("/invocations-bidirectional-stream") as ws:
            ws.send_text(json.dumps({"text": "Hi.", "request_id": "r0"}))
            assert ws.receive_json()["type"] == "synthesis_start"  # r0 now holds the engine
            for index in range(1, 31):
                ws.send_text(json.dumps({"text": "Hi.", "request_id": f"r{index}"}))
            refused = [ws.receive_json() for _ in range(30 - INBOX_MAX_MESSAGES)]
            assert {frame["error"] for frame in refused} == {"too_many_pending"}
            assert [frame["request_id"] for frame in refused] == [
                f"r{index}" for index in range(INBOX_MAX_MESSAGES + 1, 31)
            ]
            hold.set()
            completed: list[dict[str, Any]] = []
            while len(completed) <= INBOX_MAX_MESSAGES:
                message = ws.receive()
                if "text" in message and json.loads(message["text"])["type"] != "synthesis_start":
                    completed.append(json.loads(message["text"]))
    assert [frame["type"] for frame in completed] == ["synthesis_complete"] * 17
    assert [frame["request_id"] for frame in completed] == [f"r{i}" for i in range(17)]


def test_a_client_that_floods_then_leaves_frees_its_slot(port: int, client: httpx.Client) -> None:
    url = f"ws://127.0.0.1:{port}/invocations-bidirectional-stream"
    with connect(url, open_timeout=10) as ws:
        for index in range(100):
            ws.send(json.dumps({"text": "Hi.", "request_id": f"leaving-{index}"}))
        assert json.loads(ws.recv(timeout=20))["type"] == "synthesis_start"
    deadline = time.monotonic() + 20
    while client.get("/ping").headers["x-in-flight"] != "0":
        assert time.monotonic() < deadline, "the session of a client gone kept its slot"
        time.sleep(0.02)
    check_still_serving(client)
