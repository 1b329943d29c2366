"""Graceful shutdown on SIGTERM: a real server process, real sockets, four streams in flight.

SageMaker sends SIGTERM and SIGKILL 30 s later. The server must stop admitting at once, let the
streams in flight finish (or cut them cleanly at the drain deadline) and exit 0 well before that.
The process is the real server code around the fake engine (container_fake_server.py), so the
streams last as long as the test needs, whatever the machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from container_fake_server import free_port, wait_until_ready
from container_fakes import AppFactory
from starlette.testclient import TestClient
from tts_container import cli
from tts_container.drain import Drain
from tts_container.gate import InFlight
from tts_container.settings import Settings
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

HERE = Path(__file__).parent
SAGEMAKER_KILL_S = 30.0
SAMPLES = 2400  # per segment: 4800 bytes of s16le
WAIT_S = 60.0


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


def _start(tmp_path: Path, *, segments: int, delay_s: float, drain_s: float) -> Iterator[Server]:
    port = free_port()
    env = {
        **os.environ,
        "QUEUE_MAX_DEPTH": "8",
        "INFERENCE_WORKERS": "4",
        "SHUTDOWN_DRAIN_S": str(drain_s),
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "container_fake_server.py"),
                *("--port", str(port), "--segments", str(segments)),
                *("--samples", str(SAMPLES), "--delay-s", str(delay_s)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    server = Server(process, port, log)
    try:
        wait_until_ready(server.url, lambda: process.poll() is None, WAIT_S, str(log))
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


@dataclass
class Stream:
    """One audio stream on its own thread: what arrived and how it ended."""

    audio: int = 0
    first_audio: threading.Event = field(default_factory=threading.Event)
    frames: list[dict] = field(default_factory=list)
    ending: str = ""
    close_code: int | None = None


def _http_stream(url: str, stream: Stream) -> None:
    payload = {"text": "A long answer, streamed while the server is told to stop."}
    try:
        with (
            httpx.Client(timeout=WAIT_S) as client,
            client.stream("POST", url + "/invocations", json=payload) as response,
        ):
            assert response.status_code == 200, response.read()
            for chunk in response.iter_raw():
                stream.audio += len(chunk)
                stream.first_audio.set()
        stream.ending = "complete"
    except httpx.RemoteProtocolError:  # the body ended without its last chunk: cut
        stream.ending = "cut"


def _ws_stream(url: str, stream: Stream) -> None:
    ws_url = url.replace("http", "ws", 1) + "/invocations-bidirectional-stream"
    with connect(ws_url, open_timeout=WAIT_S) as ws:
        ws.send(json.dumps({"text": "A long answer over the WebSocket.", "request_id": "ws"}))
        try:
            while True:
                message = ws.recv(timeout=WAIT_S)
                if isinstance(message, bytes):
                    stream.audio += len(message)
                    stream.first_audio.set()
                else:
                    stream.frames.append(json.loads(message))
        except ConnectionClosed as closed:
            stream.close_code = closed.rcvd.code if closed.rcvd is not None else None
    kinds = [frame["type"] for frame in stream.frames]
    stream.ending = "complete" if "synthesis_complete" in kinds else "cut"


def _four_streams_in_flight(server: Server) -> tuple[list[Stream], list[threading.Thread]]:
    """Three HTTP streams and one WebSocket stream, each past its first audio."""
    streams = [Stream() for _ in range(4)]
    targets = [_http_stream, _http_stream, _http_stream, _ws_stream]
    threads = [
        threading.Thread(target=target, args=(server.url, stream), daemon=True)
        for target, stream in zip(targets, streams, strict=True)
    ]
    for thread in threads:
        thread.start()
    for stream in streams:
        assert stream.first_audio.wait(WAIT_S), server.logs()
    deadline = time.monotonic() + WAIT_S
    while httpx.get(server.url + "/ping", timeout=5).headers["x-in-flight"] != "4":
        assert time.monotonic() < deadline, "the four streams were never in flight together"
        time.sleep(0.02)
    return streams, threads


@pytest.fixture
def slow_streams(tmp_path: Path) -> Iterator[Server]:
    """Streams of 40 segments, 0.25 s apart (10 s each): within a 20 s drain."""
    yield from _start(tmp_path, segments=40, delay_s=0.25, drain_s=20)


@pytest.fixture
def endless_streams(tmp_path: Path) -> Iterator[Server]:
    """Streams of 400 segments, 0.1 s apart (40 s): longer than the drain of 1 s."""
    yield from _start(tmp_path, segments=400, delay_s=0.1, drain_s=1)


def test_sigterm_lets_four_streams_in_flight_finish_then_exits_0(slow_streams: Server) -> None:
    server = slow_streams
    with httpx.Client(base_url=server.url, timeout=10) as kept_alive:
        assert kept_alive.get("/ping").status_code == 200  # a connection open before SIGTERM
        streams, threads = _four_streams_in_flight(server)
        server.process.send_signal(signal.SIGTERM)

        # no more admissions: 503 shutting_down on an open connection, refused new connections
        deadline = time.monotonic() + 10
        while kept_alive.get("/ping").status_code != 503:  # /ping says "stopping" once it drains
            assert time.monotonic() < deadline, "SIGTERM never started the drain"
            time.sleep(0.02)
        refused = kept_alive.post("/invocations", json={"text": "One more, please."})
        assert refused.status_code == 503
        assert refused.json()["error"] == "shutting_down"
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(server.url + "/ping", timeout=2)
            except httpx.ConnectError:
                break
            assert time.monotonic() < deadline, "the listener stayed open while draining"
            time.sleep(0.05)

        for thread in threads:
            thread.join(WAIT_S)
        # Bounded by SageMaker's kill: a process still running then raises TimeoutExpired.
        exit_status = server.process.wait(timeout=SAGEMAKER_KILL_S)
    full = 40 * SAMPLES * 2
    assert [s.ending for s in streams] == ["complete"] * 4, server.logs()
    assert [s.audio for s in streams] == [full] * 4
    assert streams[3].frames[-1]["type"] == "synthesis_complete"
    assert streams[3].close_code == 1012  # then the session closes: service restart
    assert exit_status == 0, server.logs()
    assert "drained in" in server.logs()


def test_streams_longer_than_the_drain_are_cut_cleanly_and_the_exit_is_0(
    endless_streams: Server,
) -> None:
    server = endless_streams
    streams, threads = _four_streams_in_flight(server)
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(WAIT_S)
    # The streams run 40 s; cut after the 1 s drain, each ended short of its audio and the
    # process gone before SageMaker's kill (else TimeoutExpired), with no clock compared.
    exit_status = server.process.wait(timeout=SAGEMAKER_KILL_S)
    assert [s.ending for s in streams] == ["cut"] * 4, server.logs()
    assert all(0 < s.audio < 400 * SAMPLES * 2 for s in streams)
    assert streams[3].frames[-1]["error"] == "shutting_down"
    assert streams[3].close_code == 1012
    assert exit_status == 0, server.logs()
    assert "drain deadline: cutting 4 streams" in server.logs()


def test_while_draining_nothing_is_admitted_on_either_path(make_app: AppFactory) -> None:
    app, engine, _ = make_app(queue_max_depth=2)
    with TestClient(app) as client:
        assert app.state.tts.ready_event.wait(WAIT_S)
        app.state.tts.drain.begin()
        refused = client.post("/invocations", json={"text": "Hello."})
        assert refused.status_code == 503
        assert refused.json() == {
            "error": "shutting_down",
            "detail": "the server is shutting down; retry elsewhere",
        }
        assert refused.headers["connection"] == "close"
        ping = client.get("/ping")
        assert (ping.status_code, ping.json()) == (503, {"status": "stopping"})
        with client.websocket_connect("/invocations-bidirectional-stream") as ws:
            ws.send_text(json.dumps({"text": "Hello.", "request_id": "late"}))
            assert ws.receive_json()["error"] == "shutting_down"
    assert engine.started == ["warmup"]


def test_the_drain_cuts_what_is_registered_and_waits_for_the_count() -> None:
    in_flight = InFlight(4)
    drain = Drain(in_flight)
    cut: list[str] = []
    drain.register(lambda: cut.append("a"))
    unregister_b = drain.register(lambda: cut.append("b"))
    unregister_b()
    assert in_flight.try_acquire()
    assert not asyncio.run(drain.wait(0.05))  # one still in flight
    assert drain.cut_all() == 1
    assert cut == ["a"]
    drain.begin()
    assert not in_flight.try_acquire()
    assert in_flight.refusal()[0] == "shutting_down"
    in_flight.release()
    assert asyncio.run(drain.wait(0.05))
    assert in_flight.peak == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "SHUTDOWN_DRAIN_S must be a number, got 'soon'"),
        ("-1", "SHUTDOWN_DRAIN_S must be a finite number >= 0, got '-1'"),
        (
            "26",
            "shutdown_drain_s must be <= 25 (SageMaker kills 30 s after SIGTERM), got 26 "
            "(check the environment variables)",
        ),
    ],
)
def test_a_bad_drain_bound_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    monkeypatch.setenv("SHUTDOWN_DRAIN_S", value)
    assert cli.main(["--port", str(free_port())]) == 2
    assert capsys.readouterr().err.strip() == f"tts-serve: error: {message}"


def test_the_drain_bound_defaults_to_20_s() -> None:
    assert Settings.from_env({}).shutdown_drain_s == 20.0
    assert Settings.from_env({"SHUTDOWN_DRAIN_S": " 2.5 "}).shutdown_drain_s == 2.5
