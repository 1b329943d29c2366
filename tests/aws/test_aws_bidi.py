"""`bidi` on SageMaker: the Python-version gate and one worker's stream, driven by fakes.

The SDK (aws-sdk-sagemaker-runtime-http2) needs Python 3.12+; the session logic is tested here
with stand-ins named like its event classes, so it runs on every Python.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tts_scaling.aws.fingerprint import Deployment
from pytest_tts_scaling.core.records import RequestSpec, StreamTimer
from pytest_tts_scaling.endpoints.sagemaker import SageMakerEndpoint
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.load.transports.sagemaker_bidi import (
    BidiSession,
    BidiStreamBroken,
    SageMakerBidiTransport,
)

PCM = b"\x02\x00" * 1200


@dataclass
class Part:  # stands for ResponsePayloadPart
    bytes_: bytes | None
    data_type: str | None


@dataclass
class ResponseStreamEventPayloadPart:
    value: Part


@dataclass
class StreamError:  # stands for ModelStreamError
    message: str
    error_code: str | None


@dataclass
class ResponseStreamEventModelStreamError:
    value: StreamError


def text(message: dict[str, Any]) -> ResponseStreamEventPayloadPart:
    return ResponseStreamEventPayloadPart(Part(json.dumps(message).encode(), "UTF8"))


def audio(data: bytes) -> ResponseStreamEventPayloadPart:
    return ResponseStreamEventPayloadPart(Part(data, "BINARY"))


class FakeReceiver:
    def __init__(self, events: list[tuple[float, Any]]):
        self.events = list(events)

    async def receive(self) -> Any:
        if not self.events:
            return None
        delay, event = self.events.pop(0)
        await asyncio.sleep(delay)
        if isinstance(event, Exception):
            raise event
        return event


class FakeDuplexStream:
    def __init__(self, events: list[tuple[float, Any]]):
        self.sent: list[Any] = []
        self.receiver = FakeReceiver(events)
        outer = self

        class Publisher:
            async def send(self, event: Any) -> None:
                outer.sent.append(event)

        self.input_stream = Publisher()

    async def await_output(self) -> tuple[None, FakeReceiver]:
        return None, self.receiver


def run(
    events: list[tuple[float, Any]], timeout_s: float = 60.0
) -> tuple[StreamTimer, FakeDuplexStream, BaseException | None]:
    stream = FakeDuplexStream(events)
    session = BidiSession(stream, timeout_s=timeout_s, make_part=lambda data: ("UTF8", data))
    spec = RequestSpec(request_id="b1", body={"text": "Hi.", "request_id": "b1"})
    timer = StreamTimer(spec.audio)
    error: BaseException | None = None
    try:
        asyncio.run(session.send(spec, timer))
    except BidiStreamBroken as exc:
        error = exc
    return timer, stream, error


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the gate applies below Python 3.12")
def test_bidi_on_python_311_says_it_needs_312(tmp_path: Path) -> None:
    deployment = Deployment(
        endpoint="speech-x",
        status="InService",
        config_name="c",
        variants=(),
        variant="AllTraffic",
        model_name="m",
        instance_type="ml.g4dn.xlarge",
        image="i",
        image_digest="sha256:00000000",
    )
    endpoint = SageMakerEndpoint(deployment, clients=None, artifacts_dir=tmp_path, log=print)  # type: ignore[arg-type]
    with pytest.raises(InputError) as caught:
        endpoint.transport("bidi", concurrency=4)
    message = str(caught.value)
    assert "aws-sdk-sagemaker-runtime-http2" in message
    assert "Python 3.12" in message
    assert "--transport response-stream" in message
    assert "\n" not in message


def test_request_goes_out_as_one_utf8_part_and_audio_is_timed() -> None:
    timer, stream, error = run(
        [
            (0.0, text({"type": "synthesis_start"})),
            (0.15, audio(PCM)),
            (0.02, audio(PCM)),
            (0.0, text({"type": "synthesis_complete"})),
        ]
    )
    assert error is None
    assert timer.status == "ok"
    assert timer.audio_bytes == 2 * len(PCM)
    assert timer.first_audio_ns is not None
    assert timer.start_ns is not None
    assert (timer.first_audio_ns - timer.start_ns) / 1e6 >= 150
    assert len(stream.sent) == 1
    assert stream.sent[0][0] == "UTF8"
    assert json.loads(stream.sent[0][1])["text"] == "Hi."


def test_queue_saturated_is_a_rejection_and_the_stream_lives_on() -> None:
    timer, _, error = run([(0.0, text({"type": "error", "error": "queue_saturated"}))])
    assert error is None
    assert (timer.status, timer.error_code) == ("rejected", "queue_saturated")


def test_model_stream_error_fails_the_request_and_the_stream() -> None:
    timer, _, error = run(
        [
            (0.0, audio(PCM)),
            (0.0, ResponseStreamEventModelStreamError(StreamError("crash", "ModelError.500"))),
        ]
    )
    assert isinstance(error, BidiStreamBroken)
    assert (timer.status, timer.error_code) == ("error", "ModelStreamError:ModelError.500")


def test_raised_sdk_error_is_recorded_with_its_name() -> None:
    class InternalStreamFailure(Exception):
        pass

    timer, _, error = run([(0.0, InternalStreamFailure("gone"))])
    assert isinstance(error, BidiStreamBroken)
    assert (timer.status, timer.error_code) == ("error", "InternalStreamFailure")


def test_closed_stream_and_timeout_break_the_session() -> None:
    timer, _, error = run([(0.0, audio(PCM))])
    assert isinstance(error, BidiStreamBroken)
    assert (timer.status, timer.error_code) == ("error", "stream_closed")
    timer, _, error = run([(1.0, audio(PCM))], timeout_s=0.1)
    assert isinstance(error, BidiStreamBroken)
    assert (timer.status, timer.error_code) == ("timeout", "invocation_timeout")


def test_transport_opens_one_stream_per_session_and_closes_it() -> None:
    streams: list[Any] = []

    class Client:
        async def invoke_endpoint_with_bidirectional_stream(self, request: Any) -> Any:
            stream = FakeDuplexStream(
                [(0.0, audio(b"\x01\x00" * 240)), (0.0, text({"type": "synthesis_complete"}))]
            )
            stream.closed = False  # type: ignore[attr-defined]

            async def close() -> None:
                stream.closed = True  # type: ignore[attr-defined]

            stream.close = close  # type: ignore[attr-defined]
            streams.append((request, stream))
            return stream

    transport = SageMakerBidiTransport(
        "speech-x",
        variant="AllTraffic",
        client_factory=Client,
        make_input=lambda endpoint, variant: f"input {endpoint} {variant}",
        make_part=lambda data: ("UTF8", data),
    )

    async def go() -> str:
        async with transport, transport.session() as session:
            spec = RequestSpec(request_id="r", body={"text": "x"})
            timer = StreamTimer(spec.audio)
            await session.send(spec, timer)
            return timer.status

    assert asyncio.run(go()) == "ok"
    assert [request for request, _ in streams] == ["input speech-x AllTraffic"]
    assert streams[0][1].closed


def test_the_runtime_endpoint_follows_the_standard_endpoint_settings(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    from pytest_tts_scaling.load.transports.sagemaker_bidi import ENDPOINT_ENV, runtime_endpoint

    session = boto3.Session()
    # AWS_ENDPOINT_URL (here: moto) applies to the HTTP/2 runtime as to every service.
    assert runtime_endpoint(session, "us-east-1") == aws_env["AWS_ENDPOINT_URL"]
    monkeypatch.setenv(ENDPOINT_ENV, "http://127.0.0.1:9")
    assert runtime_endpoint(session, "us-east-1") is None  # the SDK's resolver reads its own
    monkeypatch.delenv(ENDPOINT_ENV)
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert runtime_endpoint(session, "us-east-1") == (
        "https://runtime.sagemaker.us-east-1.amazonaws.com:8443"
    )
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
    # The partition's DNS suffix, not amazonaws.com everywhere.
    assert runtime_endpoint(session, "cn-north-1") == (
        "https://runtime.sagemaker.cn-north-1.amazonaws.com.cn:8443"
    )
    assert runtime_endpoint(session, "eu-west-1") == (
        "https://runtime.sagemaker.eu-west-1.amazonaws.com:8443"
    )
