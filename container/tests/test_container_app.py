"""The app in-process with a fake engine: streaming, errors, admission gate, disconnects, /ping."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import threading
from typing import Any

import numpy as np
import pytest
from container_fakes import (
    SAMPLE_VALUE,
    WAIT_S,
    AppFactory,
    FakeEngine,
    HttpResult,
    eventually,
    post,
    running,
)
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Message
from tts_container.engine import Engine
from tts_container.settings import Settings

PCM_TYPE = "audio/pcm;rate=24000;channels=1;encoding=s16le"


def emf_lines(metrics_out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in metrics_out.getvalue().splitlines() if line]


def test_ping_is_503_until_the_model_is_loaded_and_warm(make_app: AppFactory) -> None:
    loaded = threading.Event()

    async def scenario() -> None:
        app, engine, _ = make_app()
        factory = app.state.tts.engine_factory

        def slow_factory(settings: Settings) -> Engine:
            assert loaded.wait(10)
            return factory(settings)

        app.state.tts.engine_factory = slow_factory
        async with running(app, ready=False) as state:
            result = await _get(app, "/ping")
            assert result == (503, {"status": "loading"})
            refused = await post(app, {"text": "Hello."})
            assert refused.status == 503
            assert refused.json()["error"] == "not_ready"
            loaded.set()
            assert await asyncio.to_thread(state.ready_event.wait, 10)
            assert await _get(app, "/ping") == (200, {"status": "ready"})
            assert engine.started == ["warmup"]

    asyncio.run(scenario())


async def _get(app: ASGIApp, path: str) -> tuple[int, dict[str, Any]]:
    messages: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        messages.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return messages[0]["status"], json.loads(body)


def test_audio_streams_as_each_segment_is_synthesized(make_app: AppFactory) -> None:
    engine = FakeEngine(segments=3, samples=2400, delay_s=0.15)

    async def scenario() -> tuple[HttpResult, io.StringIO]:
        app, _, metrics_out = make_app(engine)
        async with running(app):
            return await post(
                app, {"text": "Hello there. Two.", "request_id": "req-1"}
            ), metrics_out

    result, metrics_out = asyncio.run(scenario())
    assert result.status == 200
    assert result.headers["content-type"] == PCM_TYPE
    assert result.headers["x-request-id"] == "req-1"
    assert result.complete
    assert [len(chunk) for chunk in result.chunks] == [4800, 4800, 4800]
    samples = np.frombuffer(result.body, dtype="<i2")
    assert samples[0] == round(SAMPLE_VALUE * 32767)
    # the first chunk went out a segment's synthesis time before the last one
    assert result.chunk_times[-1] - result.chunk_times[0] > 0.2
    (line,) = [r for r in emf_lines(metrics_out) if r["request_id"] == "req-1"]
    assert line["status"] == "ok"
    assert line["transport"] == "http"
    assert line["AudioSeconds"] == pytest.approx(0.3)
    assert line["FirstChunkLatency"] >= 100
    assert line["Latency"] >= line["FirstChunkLatency"]
    assert line["QueueWait"] >= 0


def test_wav_sends_a_streaming_header_then_pcm(make_app: AppFactory) -> None:
    async def scenario() -> HttpResult:
        app, _, _ = make_app(FakeEngine(segments=2, samples=100))
        async with running(app):
            return await post(app, {"text": "Hello.", "format": "wav"})

    result = asyncio.run(scenario())
    assert result.status == 200
    assert result.headers["content-type"] == "audio/wav"
    header = result.chunks[0]
    assert len(header) == 44
    assert header[:4] == b"RIFF"
    assert header[8:16] == b"WAVEfmt "
    assert struct.unpack("<I", header[4:8])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", header[40:44])[0] == 0xFFFFFFFF
    channels, rate = struct.unpack("<HI", header[22:28])
    assert (channels, rate) == (1, 24000)
    assert struct.unpack("<H", header[34:36])[0] == 16
    assert len(result.body) == 44 + 2 * 100 * 2


def test_request_id_comes_from_the_header_or_is_generated(make_app: AppFactory) -> None:
    async def scenario() -> tuple[HttpResult, HttpResult]:
        app, _, _ = make_app(FakeEngine(segments=1))
        async with running(app):
            from_header = await post(app, {"text": "Hi."}, headers={"x-request-id": "hdr-7"})
            generated = await post(app, {"text": "Hi."})
            return from_header, generated

    from_header, generated = asyncio.run(scenario())
    assert from_header.headers["x-request-id"] == "hdr-7"
    assert len(generated.headers["x-request-id"]) == 36  # a uuid


BAD_INPUTS = [
    pytest.param(b"{not json", {}, 400, "invalid_json", id="malformed-json"),
    pytest.param(b"[1, 2]", {}, 400, "invalid_json", id="not-an-object"),
    pytest.param(b"\xff\xfe\x00", {}, 400, "invalid_json", id="not-utf8"),
    pytest.param({"voice": "af_heart"}, {}, 400, "invalid_text", id="missing-text"),
    pytest.param({"text": ""}, {}, 422, "invalid_text", id="empty-text"),
    pytest.param({"text": "   "}, {}, 422, "invalid_text", id="blank-text"),
    pytest.param({"text": 42}, {}, 422, "invalid_text", id="number-text"),
    pytest.param({"text": ["a"]}, {}, 422, "invalid_text", id="list-text"),
    pytest.param({"text": "a", "phonemes": "b"}, {}, 422, "invalid_text", id="text-and-phonemes"),
    pytest.param({"text": "x" * 101}, {}, 413, "text_too_long", id="text-too-long"),
    pytest.param({"phonemes": "x" * 101}, {}, 413, "text_too_long", id="phonemes-too-long"),
    pytest.param({"text": "a", "voice": "zz_nobody"}, {}, 400, "unknown_voice", id="unknown-voice"),
    pytest.param({"text": "a", "voice": 3}, {}, 400, "unknown_voice", id="voice-not-string"),
    pytest.param({"text": "a", "speed": 2.5}, {}, 422, "invalid_speed", id="speed-high"),
    pytest.param({"text": "a", "speed": 0.49}, {}, 422, "invalid_speed", id="speed-low"),
    pytest.param({"text": "a", "speed": "fast"}, {}, 422, "invalid_speed", id="speed-string"),
    pytest.param({"text": "a", "speed": True}, {}, 422, "invalid_speed", id="speed-bool"),
    pytest.param({"text": "a", "format": "mp3"}, {}, 422, "invalid_format", id="format-mp3"),
    pytest.param({"text": "a", "lang_code": "x"}, {}, 422, "invalid_lang_code", id="lang-unknown"),
    pytest.param({"text": "a", "lang_code": ["j"]}, {}, 422, "invalid_lang_code", id="lang-list"),
    pytest.param(
        {"text": "a", "request_id": "has space"}, {}, 422, "invalid_request_id", id="bad-id"
    ),
    pytest.param(
        {"text": "a"},
        {"content-type": "text/plain"},
        415,
        "unsupported_media_type",
        id="text-plain",
    ),
    pytest.param(b"x" * 2_000_000, {}, 413, "payload_too_large", id="huge-body"),
]


@pytest.mark.parametrize(("payload", "headers", "status", "code"), BAD_INPUTS)
def test_bad_input_is_a_4xx_json_error(
    make_app: AppFactory, payload: object, headers: dict[str, str], status: int, code: str
) -> None:
    app, engine, _ = make_app(max_text_chars=100, queue_max_depth=1)
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    with TestClient(app) as client:
        assert app.state.tts.ready_event.wait(10)
        response = client.post(
            "/invocations", content=body, headers={"content-type": "application/json", **headers}
        )
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/json"
        error = response.json()
        assert error["error"] == code
        assert isinstance(error["detail"], str)
        assert error["detail"]
        assert response.headers["x-request-id"]
        assert app.state.tts.in_flight.depth == 0
    assert engine.started == ["warmup"]
    if code == "unknown_voice":
        assert "af_heart, am_adam" in error["detail"]


def test_speed_bounds_are_inclusive(make_app: AppFactory) -> None:
    app, engine, _ = make_app()
    with TestClient(app) as client:
        assert app.state.tts.ready_event.wait(10)
        for speed in (0.5, 2.0, 1):
            response = client.post("/invocations", json={"text": "Hi.", "speed": speed})
            assert response.status_code == 200
    assert [r.speed for r in engine.requests[1:]] == [0.5, 2.0, 1.0]


def test_lang_code_picks_the_reading_and_the_voice_never_does(make_app: AppFactory) -> None:
    """jm_kumo is the English voice: a jf_/jm_ voice without lang_code is read as English."""
    app, engine, _ = make_app(FakeEngine(voices=("jf_alpha", "jm_kumo")))
    with TestClient(app) as client:
        assert app.state.tts.ready_event.wait(10)
        for payload in (
            {"text": "Hi.", "voice": "jf_alpha"},
            {"text": "Hi.", "voice": "jm_kumo", "lang_code": None},
            {"text": "こんにちは。", "voice": "jf_alpha", "lang_code": "j"},
        ):
            assert client.post("/invocations", json=payload).status_code == 200
    assert [r.lang_code for r in engine.requests[1:]] == ["a", "a", "j"]


def test_a_language_without_its_frontend_is_a_4xx_naming_what_to_install(
    make_app: AppFactory,
) -> None:
    install = "pip install 'tts-container[ja]'"
    app, engine, _ = make_app(FakeEngine(unavailable_languages={"j": install}))
    with TestClient(app) as client:
        assert app.state.tts.ready_event.wait(10)
        refused = client.post("/invocations", json={"text": "こんにちは。", "lang_code": "j"})
        # phonemes need no frontend
        spoken = client.post("/invocations", json={"phonemes": "koɴɲiʨiβa.", "lang_code": "j"})
    assert refused.status_code == 422
    assert refused.json()["error"] == "language_unavailable"
    assert install in refused.json()["detail"]
    assert spoken.status_code == 200
    assert [r.phonemes for r in engine.requests[1:]] == ["koɴɲiʨiβa."]


def test_unknown_paths_and_methods_answer_json(make_app: AppFactory) -> None:
    app, _, _ = make_app()
    with TestClient(app) as client:
        assert client.get("/nope").json()["error"] == "not_found"
        assert client.get("/invocations").status_code == 405


def test_gate_answers_503_beyond_the_bound_and_releases_on_normal_end(make_app: AppFactory) -> None:
    hold = threading.Event()

    async def scenario() -> tuple[
        HttpResult,
        tuple[int, dict[str, Any]],
        list[HttpResult],
        int,
        HttpResult,
        io.StringIO,
    ]:
        app, _, metrics_out = make_app(FakeEngine(hold=hold, segments=2), queue_max_depth=2)
        async with running(app) as state:
            admitted = [asyncio.create_task(post(app, {"text": f"R{i}."})) for i in range(2)]
            await eventually(lambda: state.in_flight.depth == 2)
            # Both admitted requests are held until `hold` is set (the engine gives up after
            # WAIT_S): an answer within half that can only be the gate's, never a slot's.
            rejected = await asyncio.wait_for(post(app, {"text": "One too many."}), WAIT_S / 2)
            ping = await _get(app, "/ping")  # never gated
            hold.set()
            done = await asyncio.gather(*admitted)
            depth_after = state.in_flight.depth
            after = await post(app, {"text": "Room again."})
        return rejected, ping, done, depth_after, after, metrics_out

    rejected, ping, done, depth_after, after, metrics_out = asyncio.run(scenario())
    assert rejected.status == 503
    assert rejected.json() == {"error": "queue_saturated", "queue_depth": 2, "max_queue_depth": 2}
    assert rejected.headers["content-type"] == "application/json"
    assert ping[0] == 200
    assert [r.status for r in done] == [200, 200]
    assert depth_after == 0
    assert after.status == 200
    statuses = [line["status"] for line in emf_lines(metrics_out)]
    assert statuses.count("rejected") == 1
    assert statuses.count("ok") == 3


def test_gate_releases_when_the_engine_fails_before_audio(make_app: AppFactory) -> None:
    async def scenario() -> tuple[HttpResult, int, HttpResult, io.StringIO]:
        app, _, metrics_out = make_app(FakeEngine(fail_at=0), queue_max_depth=1)
        async with running(app) as state:
            failed = await post(app, {"text": "Boom."})
            return failed, state.in_flight.depth, await post(app, {"text": "Boom."}), metrics_out

    failed, depth, again, metrics_out = asyncio.run(scenario())
    assert failed.status == 500
    assert failed.json()["error"] == "synthesis_failed"
    assert depth == 0
    assert again.status == 500  # not 503: the first request's slot was released
    assert [line["status"] for line in emf_lines(metrics_out)] == ["failed", "failed"]


def test_gate_releases_when_the_engine_fails_mid_stream(make_app: AppFactory) -> None:
    async def scenario() -> tuple[HttpResult, int]:
        app, _, _ = make_app(FakeEngine(fail_at=1), queue_max_depth=1)
        async with running(app) as state:
            result = await post(app, {"text": "Boom later."})
            return result, state.in_flight.depth

    result, depth = asyncio.run(scenario())
    assert result.status == 200
    assert len(result.chunks) == 1
    assert not result.complete  # the stream is cut, so the client sees a broken response
    assert result.error is not None
    assert depth == 0


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
def test_client_disconnect_mid_stream_releases_the_slot_and_stops_synthesis(
    make_app: AppFactory, spec_version: str
) -> None:
    engine = FakeEngine(segments=8, delay_s=0.1)

    async def scenario() -> tuple[HttpResult, int, io.StringIO]:
        app, _, metrics_out = make_app(engine, queue_max_depth=1)
        async with running(app) as state:
            result = await post(
                app,
                {"text": "Long.", "request_id": "leaver"},
                disconnect_after_chunks=1,
                spec_version=spec_version,
            )
            depth = state.in_flight.depth
            await asyncio.to_thread(engine.wait_closed, "leaver")
            return result, depth, metrics_out

    result, depth, metrics_out = asyncio.run(scenario())
    assert not result.complete
    assert depth == 0
    assert engine.produced["leaver"] < 8 - 2  # stopped between segments, not at the end
    (line,) = [r for r in emf_lines(metrics_out) if r["request_id"] == "leaver"]
    assert line["status"] == "disconnected"


def test_queued_request_of_a_gone_client_never_starts(make_app: AppFactory) -> None:
    hold = threading.Event()
    engine = FakeEngine(hold=hold, segments=1)

    async def scenario() -> tuple[HttpResult, int, int]:
        app, _, _ = make_app(engine, inference_workers=1)
        async with running(app) as state:
            first = asyncio.create_task(post(app, {"text": "A.", "request_id": "busy"}))
            await eventually(lambda: "busy" in engine.started)
            gone = await post(app, {"text": "B.", "request_id": "gone"}, disconnect_at_once=True)
            depth_after_gone = state.in_flight.depth
            hold.set()
            await first
            await asyncio.sleep(0.2)
            return gone, depth_after_gone, state.in_flight.depth

    gone, depth_after_gone, depth_end = asyncio.run(scenario())
    assert gone.chunks == []
    assert depth_after_gone == 1  # only "busy" remains in flight
    assert depth_end == 0
    assert "gone" not in engine.started


def test_requests_beyond_the_workers_wait_in_the_queue(make_app: AppFactory) -> None:
    async def scenario() -> tuple[list[HttpResult], io.StringIO]:
        app, _, metrics_out = make_app(FakeEngine(segments=1, delay_s=0.2), inference_workers=1)
        async with running(app):
            results = await asyncio.gather(*(post(app, {"text": f"{i}."}) for i in range(3)))
            return results, metrics_out

    results, metrics_out = asyncio.run(scenario())
    assert [r.status for r in results] == [200, 200, 200]
    waits = sorted(line["QueueWait"] for line in emf_lines(metrics_out))
    # One worker, 200 ms per synthesis: each waited for the syntheses before it (a busy machine
    # only lengthens the waits and the gaps between them).
    assert waits[1] >= waits[0] + 150
    assert waits[-1] >= 300  # the third waited for two syntheses


def test_emf_line_shape(make_app: AppFactory) -> None:
    async def scenario() -> io.StringIO:
        app, _, metrics_out = make_app(FakeEngine(segments=1))
        async with running(app):
            await post(app, {"text": "Hi.", "request_id": "emf-1"})
        return metrics_out

    (line,) = emf_lines(asyncio.run(scenario()))
    meta = line["_aws"]
    assert isinstance(meta["Timestamp"], int)
    (directive,) = meta["CloudWatchMetrics"]
    assert directive["Namespace"] == "TTS/Container"
    assert directive["Dimensions"] == [["Model"]]
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {
        "FirstChunkLatency": "Milliseconds",
        "Latency": "Milliseconds",
        "AudioSeconds": "Seconds",
        "QueueWait": "Milliseconds",
        "SegmentQueueWait": "Milliseconds",
        "BatchSize": "Count",
        "DeadlineMisses": "Count",
    }
    assert line["BatchSize"] == [1]
    assert len(line["SegmentQueueWait"]) == 1
    assert line["DeadlineMisses"] == 0
    assert line["Model"] == "test-model"
    assert (line["request_id"], line["transport"], line["status"]) == ("emf-1", "http", "ok")
