"""Any speech server as it is: the scenario's path, headers and keys, server-sent audio, and
the shipped OpenAI-style scenarios against the calibration server's OpenAI face."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer, Slots
from pytest_tts_scaling.calibration.cases import BY_NAME, CALIBRATION_KEY, Case
from pytest_tts_scaling.core.decoding import DecodeError, ResponseFormat
from pytest_tts_scaling.core.records import RequestSpec, StreamTimer
from pytest_tts_scaling.load.scenario import ScenarioError, load_scenario, resolve
from pytest_tts_scaling.load.transports.http import HttpStreamTransport
from pytest_tts_scaling.load.workload import Workload
from pytest_tts_scaling.steps.qmax.calibration import measure
from tests.factories import timed

SHIPPED = Path(__file__).resolve().parent.parent / "scenarios"
KEY = "sk-test-not-a-real-key"
SSE = ResponseFormat(kind="sse", field="audio", end_event="speech.audio.done")


def write(folder: Path, request: str) -> Path:
    (folder / "corpus.txt").write_text("One two three four five six seven.\n")
    path = folder / "s.toml"
    path.write_text(f'name = "s"\n[text]\ncorpus = ["corpus.txt"]\n[request]\n{request}')
    return path


def test_header_values_are_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTS_KEY", KEY)
    monkeypatch.delenv("TTS_ORG", raising=False)
    path = write(
        tmp_path,
        'method = "PUT"\npath = "/v1/speak"\n'
        'headers = { Authorization = "Bearer ${TTS_KEY}", X-Price = "$5" }\n'
        'headers_when_set = { X-Org = "${TTS_ORG}" }\n',
    )
    scenario = load_scenario(path)
    sent = scenario.http_request()
    assert (sent.method, sent.path) == ("PUT", "/v1/speak")
    assert dict(sent.headers) == {"Authorization": f"Bearer {KEY}", "X-Price": "$5"}
    assert sent.sent_headers({"authorization": "none", "Accept": "audio/*"}) == {
        "Accept": "audio/*",
        "Authorization": f"Bearer {KEY}",
        "X-Price": "$5",
    }
    summary = scenario.request_summary(sent)
    assert summary["headers"] == ["Authorization", "X-Price"]
    assert KEY not in json.dumps(summary)
    monkeypatch.setenv("TTS_ORG", "acme")
    assert dict(scenario.http_request().headers)["X-Org"] == "acme"


@pytest.mark.parametrize(
    ("request_table", "message"),
    [
        (
            'headers = { Authorization = "Bearer ${TTS_UNSET_KEY}" }\n',
            r"field 'request.headers.Authorization': environment variable TTS_UNSET_KEY is not "
            "set",
        ),
        ('headers = { "Bad Name" = "x" }\n', r"field 'request.headers.Bad Name"),
        ('path = "v1/audio/speech"\n', r"field 'request.path'"),
        ('method = "GET"\n', r"field 'request.method'"),
        ('response = "sse"\n', r"field 'request.response_field'.*\"sse\""),
        ('headers = { X-Key = "${TTS_NEWLINE}" }\n', r"field 'request.headers.X-Key'.*one line"),
    ],
)
def test_a_header_that_cannot_be_sent_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request_table: str, message: str
) -> None:
    monkeypatch.delenv("TTS_UNSET_KEY", raising=False)
    monkeypatch.setenv("TTS_NEWLINE", "a\r\nX-Injected: 1")
    path = write(tmp_path, request_table)
    with pytest.raises(ScenarioError, match=message) as info:
        load_scenario(path)
    assert "\n" not in str(info.value)


def event(document: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(document).encode() + b"\n\n"


def delta(audio: bytes) -> bytes:
    return event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


def test_sse_audio_is_timed_at_the_first_event_that_carries_it() -> None:
    stream = (
        b": keep-alive comment\r\n\r\n"
        + event({"type": "speech.audio.start"})
        + delta(b"\x01\x02" * 100).replace(b"\n", b"\r\n")
        + b"event: speech.audio.delta\ndata: "
        + json.dumps({"audio": base64.b64encode(b"\x03" * 50).decode()}).encode()
        + b"\n\n"
        + event({"type": "speech.audio.done", "usage": {"input_tokens": 3}})
    )
    # Split mid-line, mid-event: the first audio is in the third piece.
    cut = stream.index(b"speech.audio.delta") + 5
    pieces = [stream[:10], stream[10:cut], stream[cut:]]
    timer = timed(SSE, pieces)
    assert (timer.status, timer.error_code) == ("ok", None)
    assert timer.audio_bytes == 250
    assert timer.decoder is not None
    assert bytes(timer.decoder.payload) == b"\x01\x02" * 100 + b"\x03" * 50
    assert timer.first_audio_ns == 3 * 10**6


def test_sse_stream_without_its_end_event_was_cut_short() -> None:
    timer = timed(SSE, [delta(b"\x00" * 64)])
    assert timer.status == "error"
    assert timer.error_code is not None
    assert "ended before its 'speech.audio.done' event" in timer.error_code


def test_data_done_ends_an_sse_stream_too() -> None:
    response = ResponseFormat(kind="sse", field="audio")
    timer = timed(response, [delta(b"\x00" * 64), b"data: [DONE]\n\n", delta(b"\x00" * 64)])
    assert (timer.status, timer.audio_bytes) == ("ok", 64)


def test_sse_event_that_is_not_json_does_not_decode() -> None:
    with pytest.raises(DecodeError, match="not JSON"):
        SSE.decoder().feed(b"data: {oops\n\n")


@pytest.mark.parametrize(
    "body", [b"", event({"type": "speech.audio.done"})], ids=["empty", "sse-done-only"]
)
def test_a_200_without_audio_is_no_audio_not_a_fast_success(body: bytes) -> None:
    """Kokoro-FastAPI answers English in a jm_* voice without lang_code with an empty 200."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    async def go() -> StreamTimer:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, HttpStreamTransport(f"http://127.0.0.1:{port}") as transport:
            response = ResponseFormat() if not body else SSE
            spec = RequestSpec(request_id="r1", body={"text": "hi"}, response=response)
            timer = StreamTimer(spec.audio, decoder=spec.decoder())
            async with transport.session() as session:
                await session.send(spec, timer)
            return timer

    timer = asyncio.run(go())
    assert (timer.status, timer.error_code, timer.http_status) == ("error", "no_audio", 200)


def send_one(base_url: str, spec: RequestSpec) -> StreamTimer:
    async def go() -> StreamTimer:
        async with HttpStreamTransport(base_url) as transport, transport.session() as session:
            timer = StreamTimer(spec.audio, decoder=spec.decoder())
            await session.send(spec, timer)
            return timer

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("scenario", "body_format"),
    [("openai-speech", "raw"), ("openai-speech-sse", "sse"), ("kokoro-fastapi", "raw")],
)
def test_shipped_scenarios_speak_to_an_openai_style_server_with_the_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, scenario: str, body_format: Literal["raw", "sse"]
) -> None:
    face = SerialStreamServer(
        service_s=0.02, first_audio_s=0.01, face="openai", api_key=KEY, body_format=body_format
    )
    loaded = load_scenario(resolve(scenario, [SHIPPED]))
    with face as server:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        keyless = Workload.from_scenario(loaded, model="tts-1").request(1, 0, 0)
        refused = send_one(server.base_url, keyless)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        spec = Workload.from_scenario(loaded, model="tts-1").request(1, 0, 0)
        answered = send_one(server.base_url, spec)
    assert (refused.status, refused.error_code) == ("error", "http_401:invalid_api_key")
    assert (answered.status, answered.error_code) == ("ok", None)
    assert answered.audio_bytes == 960  # 20 ms of 24 kHz 16-bit audio
    assert spec.http.path == "/v1/audio/speech"
    body = json.loads(spec.payload)
    assert body["input"]
    assert body["response_format"] == "pcm"
    if scenario == "kokoro-fastapi":
        assert body["lang_code"] == "a"


def test_the_openai_face_refuses_the_container_contract() -> None:
    with SerialStreamServer(face="openai", service_s=0.02, first_audio_s=0.01) as server:
        timer = send_one(server.base_url, Workload().request(1, 0, 0))
    assert timer.error_code == "http_404:not_found"


def test_tts_bench_load_sends_the_shipped_sse_scenario_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    face = SerialStreamServer(
        service_s=0.05, first_audio_s=0.01, slots=4, face="openai", api_key=KEY, body_format="sse"
    )
    records = tmp_path / "load.jsonl"
    with face as server:
        done = subprocess.run(
            [sys.executable, "-m", "pytest_tts_scaling.cli", "load", "--endpoint-url",
             server.base_url, "--scenario", "openai-speech-sse", "--users", "2", "--duration",
             "1", "--records", str(records)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-2000:]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert rows
    assert {r["status"] for r in rows} == {"ok"}
    assert all(r["audio_bytes"] == 2400 for r in rows)  # 50 ms, as base64 in events


def test_tts_bench_load_says_an_unset_key_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = write(tmp_path, 'headers = { Authorization = "Bearer ${TTS_UNSET_KEY}" }\n')
    monkeypatch.delenv("TTS_UNSET_KEY", raising=False)
    done = subprocess.run(
        [sys.executable, "-m", "pytest_tts_scaling.cli", "load", "--endpoint-url",
         "http://127.0.0.1:9", "--scenario", str(scenario), "--users", "1", "--duration", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "environment variable TTS_UNSET_KEY is not set" in done.stderr


@pytest.mark.parametrize("name", ["openai-raw", "openai-sse"])
def test_qmax_through_the_shipped_scenario_gives_the_truth(name: str, tmp_path: Path) -> None:
    """The OpenAI face has the serial case's known Q_max; the key never reaches the artifact."""
    case = BY_NAME[name]
    lines: list[str] = []
    run = measure(case, ladder=None, hold_s=2.0, artifacts_dir=tmp_path, progress=lines.append)
    assert run.outcome.matches(case.truth()), (run.outcome, case.truth(), lines)
    (artifact,) = tmp_path.glob("qmax-*.json")
    kept = json.loads(artifact.read_text())["settings"]["request"]
    assert kept == {
        "method": "POST",
        "path": "/v1/audio/speech",
        "headers": ["Accept", "Authorization"],
        "response": case.body_format.replace("raw", "audio"),
    }
    for written in tmp_path.iterdir():
        assert CALIBRATION_KEY not in written.read_text()


def test_the_probe_after_a_silent_rung_waits_as_long_as_the_rung_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-burst server's silence raised the rungs' stall bound; the probe after a rung that
    heard nothing must not cut a lone answer sooner (Kokoro-FastAPI at N=1 on a busy host read
    as "stopped answering")."""
    from pytest_tts_scaling.load import engine
    from pytest_tts_scaling.steps import qmax

    bounds: list[float] = []

    def spy(*args: object, stall_s: float) -> str | None:
        bounds.append(stall_s)
        return None

    monkeypatch.setattr(qmax, "silence_after", spy)
    monkeypatch.setattr(qmax, "PROBE_PATIENCE_S", 1.0)
    monkeypatch.setattr(engine, "STALL_FLOOR_S", 0.2)
    seen: list[float] = []
    measure_rung = qmax.measure_rung

    def keep_stall(*args: object, stall_s: float, **kwargs: object) -> object:
        seen.append(stall_s)
        return measure_rung(*args, stall_s=stall_s, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(qmax, "measure_rung", keep_stall)
    case = Case("burst", Slots(1, service_s=0.8, first_audio_s=0.8), slo_ms=200.0)
    run = measure(case, ladder=(1,), hold_s=1.0, artifacts_dir=tmp_path)
    assert run.outcome.error is None, run.outcome
    # The probe heard 0.8 s of silence: rungs may wait 3 x 0.8 s, past the 1 s patience.
    assert seen == [pytest.approx(2.4, abs=0.3)]
    assert bounds == seen
