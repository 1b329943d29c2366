"""End to end: ``tts-serve`` in a subprocess with the untrained Kokoro-82M, over real sockets.

One server (QUEUE_MAX_DEPTH=2, one inference worker) serves every test in this module; the last
test stops it with SIGTERM.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tts_container.markers import MARKERS, parse_marker
from websockets.sync.client import connect

START_TIMEOUT_S = 240.0
REQUEST_TIMEOUT_S = 120.0
SENTENCE = "Streaming speech should start early, well before the end. This is the second sentence."


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    ws_url: str
    stdout: Path
    stderr: Path

    def logs(self) -> str:
        return self.stdout.read_text() + "\n--- stderr ---\n" + self.stderr.read_text()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server(dev_model_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    executable = Path(sys.executable).with_name("tts-serve")
    assert executable.is_file(), f"console script {executable} missing: pip install -e container"
    port = _free_port()
    logs = tmp_path_factory.mktemp("tts-serve")
    env = {
        **os.environ,
        "TTS_CACHE_DIR": str(dev_model_cache),
        "WEIGHTS": "untrained",  # the server's mechanics; the trained model's speech: elsewhere
        "QUEUE_MAX_DEPTH": "2",
        "INFERENCE_WORKERS": "1",
        "DEVICE": "cpu",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("MODEL_DIR", None)
    with open(logs / "stdout.log", "wb") as out, open(logs / "stderr.log", "wb") as err:
        process = subprocess.Popen(
            [str(executable), "--port", str(port), "--host", "127.0.0.1"],
            stdout=out,
            stderr=err,
            env=env,
        )
    running = Server(
        process,
        f"http://127.0.0.1:{port}",
        f"ws://127.0.0.1:{port}/invocations-bidirectional-stream",
        logs / "stdout.log",
        logs / "stderr.log",
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, f"tts-serve exited early:\n{running.logs()}"
            assert time.monotonic() < deadline, (
                f"no /ping 200 in {START_TIMEOUT_S} s:\n{running.logs()}"
            )
            try:
                if httpx.get(running.url + "/ping", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield running
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def test_a_sentence_streams_as_chunked_audio(server: Server) -> None:
    payload = {"text": SENTENCE, "voice": "af_heart", "request_id": "e2e-stream"}
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        began = time.perf_counter()
        with client.stream("POST", server.url + "/invocations", json=payload) as response:
            assert response.status_code == 200
            assert response.headers["transfer-encoding"] == "chunked"
            assert (
                response.headers["content-type"] == "audio/pcm;rate=24000;channels=1;encoding=s16le"
            )
            assert response.headers["x-request-id"] == "e2e-stream"
            first_audio = None
            total = 0
            for chunk in response.iter_bytes():
                if chunk and first_audio is None:
                    first_audio = time.perf_counter() - began
                total += len(chunk)
        ended = time.perf_counter() - began
    assert first_audio is not None
    assert total % 2 == 0
    audio_s = total / 2 / 24000
    assert 1.0 < audio_s < 20.0
    # the first (short) segment went out while later ones were still being synthesized
    assert first_audio < ended * 0.7, (first_audio, ended)


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (b"{oops", "application/json", 400, "invalid_json"),
        (json.dumps({"text": ""}).encode(), "application/json", 422, "invalid_text"),
        (json.dumps({"text": "x" * 5001}).encode(), "application/json", 413, "text_too_long"),
        (
            json.dumps({"text": "Hi.", "voice": "nobody"}).encode(),
            "application/json",
            400,
            "unknown_voice",
        ),
        (
            json.dumps({"text": "Hi.", "speed": 9}).encode(),
            "application/json",
            422,
            "invalid_speed",
        ),
        (
            json.dumps({"text": "Hi.", "format": "ogg"}).encode(),
            "application/json",
            422,
            "invalid_format",
        ),
        (b"text=hi", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    ],
)
def test_bad_inputs_get_4xx_json(
    server: Server, body: bytes, content_type: str, status: int, code: str
) -> None:
    response = httpx.post(
        server.url + "/invocations",
        content=body,
        headers={"content-type": content_type},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert response.status_code == status
    assert response.json()["error"] == code
    assert response.json()["detail"]


def test_overload_gets_only_200_or_503_and_ping_stays_fast(server: Server) -> None:
    results: list[tuple[int, dict | None]] = []
    start = threading.Barrier(9)
    done = threading.Event()
    pings: list[float] = []

    def synthesize(index: int) -> None:
        payload = {"text": f"Request number {index} asks for a short sentence of audio."}
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            start.wait(timeout=30)
            try:
                response = client.post(server.url + "/invocations", json=payload)
            except httpx.HTTPError as exc:
                results.append((0, {"client_error": repr(exc)}))
                return
        body = response.json() if response.status_code != 200 else None
        results.append((response.status_code, body))

    def ping() -> None:
        # one kept-alive connection: the time is the server's answer, not the client's set-up
        with httpx.Client(timeout=5) as client:
            start.wait(timeout=30)
            while not done.is_set():
                began = time.perf_counter()
                status = client.get(server.url + "/ping").status_code
                pings.append(time.perf_counter() - began)
                assert status == 200
                time.sleep(0.05)

    threads = [threading.Thread(target=synthesize, args=(i,)) for i in range(8)]
    pinger = threading.Thread(target=ping)
    for thread in [*threads, pinger]:
        thread.start()
    for thread in threads:
        thread.join(timeout=REQUEST_TIMEOUT_S)
    done.set()
    pinger.join(timeout=10)

    assert len(results) == 8, results
    statuses = [status for status, _ in results]
    assert set(statuses) == {200, 503}, results
    assert 1 <= statuses.count(200) <= 4
    for status, body in results:
        if status == 503:
            assert body is not None
            assert body["error"] == "queue_saturated"
            assert body["max_queue_depth"] == 2
            assert body["queue_depth"] == 2
    assert len(pings) >= 10
    # SageMaker's health check times out after 2 s: no ping may come near it. The 500 ms target
    # holds for the 95th percentile; a single slower one happens only when other processes on this
    # (shared, 2-core) machine starve the server and the test client too.
    slowest = sorted(pings)
    assert slowest[-1] < 2.0, slowest[-5:]
    assert slowest[int(0.95 * (len(slowest) - 1))] < 0.5, slowest[-5:]


def test_websocket_session_carries_two_requests(server: Server) -> None:
    with connect(server.ws_url, open_timeout=30) as ws:
        for index, request_id in enumerate(["ws-1", "bad", "ws-2"]):
            voice = "nobody" if request_id == "bad" else "am_adam"
            ws.send(
                json.dumps(
                    {
                        "text": f"WebSocket request {index}.",
                        "voice": voice,
                        "request_id": request_id,
                    }
                )
            )
            audio = 0
            frames = []
            while True:
                message = ws.recv(timeout=REQUEST_TIMEOUT_S)
                if isinstance(message, bytes):
                    audio += len(message)
                    continue
                frames.append(json.loads(message))
                if frames[-1]["type"] in ("synthesis_complete", "error"):
                    break
            if request_id == "bad":
                assert frames == [
                    {
                        "type": "error",
                        "request_id": "bad",
                        "error": "unknown_voice",
                        "detail": frames[0]["detail"],
                    }
                ]
                continue
            assert frames[0] == {"type": "synthesis_start", "request_id": request_id}
            assert frames[-1]["type"] == "synthesis_complete"
            assert frames[-1]["audio_bytes"] == audio > 0
            assert frames[-1]["audio_s"] == pytest.approx(audio / 48000)
        assert ws.ping().wait(timeout=10)  # the server answers WebSocket pings


def test_log_markers_and_metrics_lines(server: Server) -> None:
    lines = server.stdout.read_text().splitlines()
    markers = [m for m in map(parse_marker, lines) if m is not None]
    assert [m.name for m in markers] == list(MARKERS)
    assert all(a.at <= b.at for a, b in itertools.pairwise(markers))
    assert all(a.elapsed_s <= b.elapsed_s for a, b in itertools.pairwise(markers))
    records = [json.loads(line) for line in lines if line.startswith('{"_aws"')]
    by_id = {r["request_id"]: r for r in records}
    streamed = by_id["e2e-stream"]
    assert streamed["status"] == "ok"
    assert streamed["transport"] == "http"
    assert 0 < streamed["FirstChunkLatency"] < streamed["Latency"]
    assert by_id["ws-2"]["transport"] == "websocket"
    assert any(r["status"] == "rejected" for r in records)
    assert "UNTRAINED WEIGHTS" in server.stderr.read_text()


def test_sigterm_stops_the_server_cleanly(server: Server) -> None:
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    assert "Finished server process" in server.stderr.read_text()


def test_a_missing_model_directory_stops_the_server_with_status_1(tmp_path: Path) -> None:
    executable = Path(sys.executable).with_name("tts-serve")
    missing = tmp_path / "no-model-here"
    completed = subprocess.run(
        [str(executable), "--port", str(_free_port()), "--model-dir", str(missing)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TTS_CACHE_DIR": str(tmp_path / "cache")},
        check=False,
    )
    assert completed.returncode == 1, completed.stderr
    assert f"model directory {missing} does not exist" in completed.stderr
    markers = [m.name for m in map(parse_marker, completed.stdout.splitlines()) if m]
    assert markers == ["container_started", "framework_init"]


def test_sigterm_while_the_model_loads_exits_cleanly(tmp_path: Path) -> None:
    executable = Path(sys.executable).with_name("tts-serve")
    out_path = tmp_path / "stdout.log"
    env = {**os.environ, "TTS_CACHE_DIR": str(tmp_path / "empty-cache"), "DEVICE": "cpu"}
    with open(out_path, "wb") as out, open(tmp_path / "stderr.log", "wb") as err:
        process = subprocess.Popen(
            [str(executable), "--port", str(_free_port())], stdout=out, stderr=err, env=env
        )
    try:
        deadline = time.monotonic() + 120
        while "framework_init" not in out_path.read_text():  # loading: building the dev model
            assert process.poll() is None, (tmp_path / "stderr.log").read_text()
            assert time.monotonic() < deadline, "the server never started loading"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, (tmp_path / "stderr.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert "ready" not in [
        m.name for m in map(parse_marker, out_path.read_text().splitlines()) if m
    ]
