"""`bidi` on SageMaker: InvokeEndpointWithBidirectionalStream, one stream per worker.

boto3 has no bidirectional streaming; it is in `aws-sdk-sagemaker-runtime-http2` (the `bidi`
extra), which needs Python 3.12+ and the awscrt HTTP/2 transport, on port 8443. Region and
credentials still come from boto3's standard chain, handed to that SDK.

Each request is one UTF8 PayloadPart holding the JSON request (the container receives it as a
WebSocket text frame); the container answers with UTF8 control messages (`synthesis_start`,
`synthesis_complete`, `error`) and BINARY parts of PCM, whose bytes go to the timer.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pytest_tts_scaling.core.records import RequestSpec, StreamTimer
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.load.transports import INVOCATION_LIMIT_S, Session, Transport

BIDI_PORT = 8443
# A custom endpoint for the HTTP/2 runtime (the SDK's own setting); see runtime_endpoint().
ENDPOINT_ENV = "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME_HTTP2"
QUEUE_SATURATED = "queue_saturated"
CLOSE_TIMEOUT_S = 5.0
STREAM_FAILURES = ("ModelStreamError", "InternalStreamFailure")


class BidiStreamBroken(ConnectionError):
    """The bidirectional stream ended or failed; the worker opens a new one."""


def require_bidi_sdk() -> None:
    """Raise a one-line InputError unless the bidirectional-streaming SDK can be used here."""
    if sys.version_info < (3, 12):
        version = ".".join(map(str, sys.version_info[:3]))
        raise InputError(
            f"--transport bidi on SageMaker needs aws-sdk-sagemaker-runtime-http2, which requires "
            f"Python 3.12 or newer; this is Python {version}. Run under Python >= 3.12 with "
            "`pip install 'pytest-tts-scaling[aws]'`, or use --transport response-stream"
        )
    try:
        import aws_sdk_sagemaker_runtime_http2  # noqa: F401
        import awscrt  # noqa: F401
    except ImportError as exc:
        raise InputError(
            f"--transport bidi on SageMaker needs aws-sdk-sagemaker-runtime-http2 with awscrt "
            f"({exc.name} is not installed): `pip install 'pytest-tts-scaling[aws]'`"
        ) from None


class _Boto3Credentials:
    """An identity resolver for the smithy SDK that asks boto3's credential chain each time."""

    def __init__(self, session: Any):
        self.session = session

    async def get_identity(self, *, properties: Any) -> Any:
        from smithy_aws_core.identity import AWSCredentialsIdentity

        credentials = self.session.get_credentials()
        if credentials is None:
            raise InputError("no AWS credentials found (boto3's standard configuration)")
        frozen = credentials.get_frozen_credentials()
        return AWSCredentialsIdentity(
            access_key_id=frozen.access_key,
            secret_access_key=frozen.secret_key,
            session_token=frozen.token,
        )


class SageMakerBidiTransport(Transport):
    name = "bidi"

    def __init__(
        self,
        endpoint: str,
        *,
        variant: str | None = None,
        timeout_s: float = INVOCATION_LIMIT_S,
        client_factory: Callable[[], Any] | None = None,
        make_input: Callable[[str, str | None], Any] | None = None,
        make_part: Callable[[bytes], Any] | None = None,
    ):
        """The SDK pieces are injectable so the session logic can be tested on any Python."""
        if client_factory is None:
            require_bidi_sdk()
        self.endpoint = endpoint
        self.variant = variant
        self.timeout_s = timeout_s
        self._client_factory = client_factory or _default_client
        self._make_input = make_input or _stream_input
        self._make_part = make_part or _payload_part
        self._client: Any = None
        self._lock: asyncio.Lock | None = None

    async def client(self) -> Any:
        if self._client is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._client is None:
                    self._client = await _maybe_await(self._client_factory())
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        close = getattr(client, "close", None)
        if close is not None:
            await _maybe_await(close())

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        client = await self.client()
        request = self._make_input(self.endpoint, self.variant)
        stream = await client.invoke_endpoint_with_bidirectional_stream(request)
        try:
            yield BidiSession(stream, timeout_s=self.timeout_s, make_part=self._make_part)
        finally:
            # Best effort: closing waits for the initial response, which a broken stream
            # may never send.
            await _close_quietly(stream)


async def _close_quietly(stream: Any) -> None:
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await stream.close()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # our own cancellation, not the stream's
    except Exception:  # the stream is being discarded either way
        pass


def runtime_endpoint(session: Any, region: str) -> str | None:
    """Where the HTTP/2 runtime is, by boto3's standard endpoint settings.

    None when the SDK's own setting (`AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME_HTTP2`) is there: its
    resolver reads it. Else `AWS_ENDPOINT_URL` or a profile's `endpoint_url` (unless
    `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`), else the region's endpoint under its partition's DNS
    suffix (`amazonaws.com.cn` in China), port 8443.
    """
    if os.environ.get(ENDPOINT_ENV):
        return None
    import botocore.loaders

    from pytest_tts_scaling.load.transports.aws_config import user_config

    config = user_config(session.profile_name)
    configured = os.environ.get("AWS_ENDPOINT_URL") or config.get_scoped_config().get(
        "endpoint_url"
    )
    if configured and not config.get_config_variable("ignore_configured_endpoint_urls"):
        return str(configured)
    partition = session.get_partition_for_region(region)
    suffixes = {
        p["partition"]: p["dnsSuffix"]
        for p in botocore.loaders.create_loader().load_data("endpoints")["partitions"]
    }
    return f"https://runtime.sagemaker.{region}.{suffixes[partition]}:{BIDI_PORT}"


async def _maybe_await(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) else value


async def _default_client() -> Any:
    import boto3
    from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
    from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config
    from smithy_http.aio.crt import AWSCRTHTTPClient

    session = boto3.Session()
    region = session.region_name
    if not region:
        raise InputError(
            "no AWS region configured: expected AWS_DEFAULT_REGION or a profile region"
        )
    overrides: dict[str, Any] = {}
    endpoint = runtime_endpoint(session, region)
    if endpoint is not None:
        overrides["endpoint_uri"] = endpoint
    config = await AsyncSageMakerRuntimeHTTP2Config.resolve(
        region=region,
        aws_credentials_identity_resolver=_Boto3Credentials(session),
        transport=AWSCRTHTTPClient(),
        max_attempts=1,
        **overrides,
    )
    return AsyncSageMakerRuntimeHTTP2Client(config=config)


def _stream_input(endpoint: str, variant: str | None) -> Any:
    from aws_sdk_sagemaker_runtime_http2.models import InvokeEndpointWithBidirectionalStreamInput

    return InvokeEndpointWithBidirectionalStreamInput(
        endpoint_name=endpoint, target_variant=variant
    )


def _payload_part(data: bytes) -> Any:
    from aws_sdk_sagemaker_runtime_http2.models import (
        RequestPayloadPart,
        RequestStreamEventPayloadPart,
    )

    return RequestStreamEventPayloadPart(value=RequestPayloadPart(bytes_=data, data_type="UTF8"))


class BidiSession:
    """One worker's stream: requests go out one at a time, replies are read until complete."""

    def __init__(self, stream: Any, *, timeout_s: float, make_part: Callable[[bytes], Any]):
        self.stream = stream
        self.timeout_s = timeout_s
        self.make_part = make_part
        self.receiver: Any = None

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                timer.started()
                await self.stream.input_stream.send(self.make_part(request.payload))
                if self.receiver is None:
                    # Shielded: a timeout here must not cancel the SDK's shared future.
                    _, self.receiver = await asyncio.shield(self.stream.await_output())
                await self._read_reply(timer)
        except TimeoutError:
            timer.finished("timeout", "invocation_timeout")
            raise BidiStreamBroken("invocation timed out mid-stream") from None
        except BidiStreamBroken:
            raise
        except Exception as exc:
            # The SDK raises modeled errors (ModelStreamError, ModelError, …) from receive().
            code = type(exc).__name__
            detail = getattr(exc, "error_code", None)
            timer.finished("error", f"{code}:{detail}" if detail else code)
            raise BidiStreamBroken(f"{code}: {exc}") from exc

    async def _read_reply(self, timer: StreamTimer) -> None:
        while True:
            event = await self.receiver.receive()
            if event is None:
                timer.finished("error", "stream_closed")
                raise BidiStreamBroken("the endpoint closed the stream")
            kind = type(event).__name__
            value = getattr(event, "value", None)
            if kind.endswith("PayloadPart") and value is not None:
                if (value.data_type or "BINARY").upper() != "UTF8":
                    timer.body(value.bytes_ or b"")
                    continue
                message = json.loads(value.bytes_ or b"{}")
                if message.get("type") == "synthesis_complete":
                    timer.finished("ok")
                    return
                if message.get("type") == "error":
                    code = str(message.get("error", "error"))
                    timer.finished("rejected" if code == QUEUE_SATURATED else "error", code)
                    return
                continue
            failure = next((name for name in STREAM_FAILURES if kind.endswith(name)), None)
            if failure is not None:
                detail = getattr(value, "error_code", None)
                timer.finished("error", f"{failure}:{detail}" if detail else failure)
                raise BidiStreamBroken(f"{failure}: {getattr(value, 'message', '')}")
