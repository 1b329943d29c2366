"""The `response-stream` transport against a local event-stream server (PayloadPart framing)."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import asyncio
import json
from collections.abc import Iterator

from tts_container.audio import wav_header

from pytest_tts_scaling.core.records import AudioFormat, RequestRecord, RequestSpec, StreamTimer
from pytest_tts_scaling.load.transports import INVOCATION_LIMIT_S
from pytest_tts_scaling.load.transports.sagemaker_stream import SageMakerStreamTransport
from tests.aws.eventstream_server import (
    EventStreamServer,
    Script,
    event_stream_server,
    gate_full,
    payload_part,
    stream_exception,
)

PCM = b"\x01\x00" * 2400  # 0.1 s at 24 kHz, 16-bit mono
WAV_HEADER = wav_header(24000)


@pytest.fixture
def server(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[EventStreamServer]:
    with event_stream_server() as srv:
        monkeypatch.setenv("AWS_ENDPOINT_URL", srv.url)
        yield srv


def send(
    endpoint: str, *, fmt: str = "pcm", timeout_s: float = INVOCATION_LIMIT_S
) -> tuple[StreamTimer, RequestRecord]:
    spec = RequestSpec(
        request_id="req-1",
        body={"text": "Hello there.", "voice": "af_heart", "format": fmt, "request_id": "req-1"},
        audio=AudioFormat(),
    )
    timer = StreamTimer(spec.audio)

    async def run() -> None:
        transport = SageMakerStreamTransport(endpoint, concurrency=2, timeout_s=timeout_s)
        async with transport, transport.session() as session:
            await session.send(spec, timer)

    asyncio.run(run())
    record = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)
    return timer, record


def test_ttfab_is_the_first_part_with_audio_not_the_headers(server: EventStreamServer) -> None:
    server.scripts["ok"] = Script(
        messages=[(0.0, payload_part(b"")), (0.25, payload_part(PCM)), (0.05, payload_part(PCM))]
    )
    timer, record = send("ok")
    assert record.status == "ok"
    assert record.error_code is None
    assert record.http_status == 200
    assert record.audio_bytes == 2 * len(PCM)
    assert len(timer.chunks) == 2
    assert record.ttfab_ms is not None
    assert record.ttfab_ms >= 250
    assert record.latency_ms >= record.ttfab_ms + 40
    sent = server.received[-1]
    assert sent.path == "/endpoints/ok/invocations-response-stream"
    assert json.loads(sent.body)["text"] == "Hello there."
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["X-Amzn-SageMaker-Inference-Id"] == "req-1"


def test_wav_header_part_is_not_audio(server: EventStreamServer) -> None:
    server.scripts["wav"] = Script(
        messages=[(0.0, payload_part(WAV_HEADER)), (0.2, payload_part(PCM))]
    )
    _, record = send("wav", fmt="wav")
    assert record.status == "ok"
    assert record.audio_bytes == len(PCM)
    assert record.ttfab_ms is not None
    assert record.ttfab_ms >= 200


@pytest.mark.parametrize("kind", ["ModelStreamError", "InternalStreamFailure"])
def test_stream_error_midway_is_a_failed_request(server: EventStreamServer, kind: str) -> None:
    server.scripts["broken"] = Script(
        messages=[
            (0.0, payload_part(PCM)),
            (0.05, stream_exception(kind, "synthesis crashed", error_code="ModelError.500")),
            (0.0, payload_part(PCM)),
        ]
    )
    _, record = send("broken")
    assert record.status == "error"
    assert record.error_code == kind
    assert record.audio_bytes == len(PCM)  # the part before the error was counted
    assert record.ttfab_ms is not None


def test_admission_gate_503_through_model_error_is_a_rejection(
    server: EventStreamServer,
) -> None:
    server.scripts["full"] = gate_full(max_queue_depth=8)
    _, record = send("full")
    assert (record.status, record.error_code, record.http_status) == (
        "rejected",
        "http_503:queue_saturated",
        503,
    )
    assert record.ttfab_ms is None
    assert record.max_queue_depth == 8  # the bound, read from the container's own 503 body


def test_a_refused_connection_gets_the_engines_error_code(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    _, record = send("nobody-listens")
    assert (record.status, record.error_code) == ("error", "connection_refused")


def test_model_error_500_is_an_error(server: EventStreamServer) -> None:
    server.scripts["bad"] = Script(
        error_status=424,
        error_type="ModelError",
        error_body={"Message": "boom", "OriginalStatusCode": 500, "OriginalMessage": "oops"},
    )
    _, record = send("bad")
    assert (record.status, record.error_code, record.http_status) == ("error", "http_500", 500)


def test_platform_503_is_a_rejection_and_is_not_retried(server: EventStreamServer) -> None:
    server.scripts["busy"] = Script(
        error_status=503, error_type="ServiceUnavailable", error_body={"message": "busy"}
    )
    _, record = send("busy")
    assert (record.status, record.error_code, record.http_status) == (
        "rejected",
        "ServiceUnavailable",
        503,
    )
    assert len(server.received) == 1


def test_invocation_limit_ends_a_stalled_stream(server: EventStreamServer) -> None:
    server.scripts["stall"] = Script(messages=[(0.0, payload_part(PCM)), (3.0, payload_part(PCM))])
    _, record = send("stall", timeout_s=0.5)
    assert (record.status, record.error_code) == ("timeout", "invocation_timeout")
    assert 500 <= record.latency_ms < 2500


def test_workers_share_one_client(server: EventStreamServer) -> None:
    server.scripts["ok"] = Script(messages=[(0.0, payload_part(PCM))])

    async def run() -> list[str]:
        transport = SageMakerStreamTransport("ok", concurrency=4)
        async with transport:
            clients = set()
            statuses: list[str] = []

            async def worker(i: int) -> None:
                async with transport.session() as session:
                    clients.add(id(await transport.client()))
                    spec = RequestSpec(request_id=f"r{i}", body={"text": "x"})
                    timer = StreamTimer(spec.audio)
                    await session.send(spec, timer)
                    statuses.append(timer.status)

            await asyncio.gather(*(worker(i) for i in range(4)))
            assert len(clients) == 1
            return statuses

    assert asyncio.run(run()) == ["ok"] * 4
    assert len(server.received) == 4
