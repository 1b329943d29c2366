"""`response-stream` on SageMaker: InvokeEndpointWithResponseStream through aioboto3.

The call returns when the response headers arrive, long before audio, so TTFAB is taken at the first
PayloadPart that carries audio bytes while the event stream is iterated (docs/method.md): every
part's bytes go to `timer.body`, which skips a WAV header and ignores empty parts. A
ModelStreamError or InternalStreamFailure mid-stream ends the request as failed with that code. A
request that names an inference component (`--inference-component`) is sent to it with
InferenceComponentName. The SDK does not retry: a retried 503 would hide a rejection and inflate
TTFAB.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from pytest_tts_scaling.core.records import REJECTION_CODES, RequestSpec, RequestStatus, StreamTimer
from pytest_tts_scaling.load.transports import (
    INVOCATION_LIMIT_S,
    Session,
    Transport,
    admission_bound,
    error_outcome,
    named,
)

# A request id longer than this is cut; SageMaker's InferenceId allows 64 characters.
INFERENCE_ID_MAX = 64


class SageMakerStreamTransport(Transport):
    """One aiobotocore `sagemaker-runtime` client shared by all workers, sized for them."""

    name = "response-stream"

    def __init__(
        self,
        endpoint: str,
        *,
        concurrency: int,
        variant: str | None = None,
        timeout_s: float = INVOCATION_LIMIT_S,
        content_type: str = "application/json",
        accept: str = "audio/*",
        session_factory: Callable[[], Any] | None = None,
    ):
        self.endpoint = endpoint
        self.concurrency = max(concurrency, 1)
        self.variant = variant
        self.timeout_s = timeout_s
        self.content_type = content_type
        self.accept = accept
        self._session_factory = session_factory
        self._stack = AsyncExitStack()
        self._client: Any = None
        self._lock: asyncio.Lock | None = None

    async def client(self) -> Any:
        """The shared client, created on first use (boto3's standard configuration chain)."""
        if self._client is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._client is None:
                    import aioboto3
                    from aiobotocore.config import AioConfig

                    session = (
                        self._session_factory() if self._session_factory else aioboto3.Session()
                    )
                    config = AioConfig(
                        max_pool_connections=self.concurrency,
                        connect_timeout=10,
                        read_timeout=self.timeout_s + 5,
                        retries={"mode": "standard", "total_max_attempts": 1},
                    )
                    self._client = await self._stack.enter_async_context(
                        session.client("sagemaker-runtime", config=config)
                    )
        return self._client

    async def aclose(self) -> None:
        self._client = None
        await self._stack.aclose()

    def arguments(self, request: RequestSpec) -> dict[str, Any]:
        """InvokeEndpointWithResponseStream's arguments for one request (any client: the load
        command's boto3 users send the same)."""
        arguments: dict[str, Any] = {
            "EndpointName": self.endpoint,
            "Body": request.payload,
            "ContentType": self.content_type,
            "Accept": self.accept,
            "InferenceId": request.request_id[:INFERENCE_ID_MAX],
        }
        if self.variant:
            arguments["TargetVariant"] = self.variant
        if request.component:
            arguments["InferenceComponentName"] = request.component
        return arguments

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        yield _StreamSession(self, await self.client())


class _StreamSession:
    def __init__(self, transport: SageMakerStreamTransport, client: Any):
        self.transport = transport
        self.client = client

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        arguments = self.transport.arguments(request)
        body: Any = None
        try:
            async with asyncio.timeout(self.transport.timeout_s):
                timer.started()
                response = await self.client.invoke_endpoint_with_response_stream(**arguments)
                timer.http_status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 200)
                body = response["Body"]
                async for event in body:
                    part = event.get("PayloadPart")
                    if part is not None:
                        timer.body(part.get("Bytes") or b"")
                        if timer.hung_up_ns is not None:
                            break  # the listener hung up: the stream is closed below
        except TimeoutError:
            timer.finished("timeout", "invocation_timeout")
            return
        except ClientError as exc:
            finish_client_error(timer, exc)
            return
        except BotoCoreError as exc:
            timer.finished("error", botocore_failure_code(exc, timer))
            return
        except OSError as exc:
            timer.failed(named(exc))
            return
        except Exception as exc:  # aiohttp's errors: the request failed, the worker goes on
            if type(exc).__module__.startswith("aiohttp"):
                timer.failed(named(exc))
                return
            raise
        finally:
            if body is not None:
                body.close()
        timer.finished("ok")


def finish_client_error(timer: StreamTimer, exc: Any) -> None:
    """End an exchange that failed with a ClientError: its status, code and HTTP status.

    A ModelError carries the container's own answer, so a 503 from its admission gate names the
    bound (`max_queue_depth`) as it does over plain HTTP.
    """
    status, code, http_status = classify_client_error(exc)
    if http_status is not None:
        timer.http_status = http_status
    response = getattr(exc, "response", {}) or {}
    if response.get("OriginalStatusCode") == 503:
        timer.max_queue_depth = admission_bound(str(response.get("OriginalMessage")).encode())
    timer.finished(status, code)


def botocore_failure_code(exc: Exception, timer: StreamTimer) -> str:
    """The engine's error code (records.failure_code) for a failure botocore raised itself."""
    from botocore.exceptions import (
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
        ResponseStreamingError,
    )

    if isinstance(exc, ConnectTimeoutError):
        return "connect_timeout"
    if isinstance(exc, EndpointConnectionError):
        return "connection_refused"
    if isinstance(exc, ReadTimeoutError):
        return "stalled"
    if isinstance(exc, ResponseStreamingError):
        return "connection_dropped" if timer.audio_bytes else "no_audio"
    return type(exc).__name__


def classify_client_error(exc: Any) -> tuple[RequestStatus, str, int | None]:
    """Status, error code and HTTP status of a failed invocation or a failed stream.

    ModelError carries the container's own answer (OriginalStatusCode, OriginalMessage): a 503
    `queue_saturated` from the admission gate is a rejection, as it is over plain HTTP. Stream
    errors (ModelStreamError, InternalStreamFailure) arrive after a 200 and are failures.
    """
    from botocore.exceptions import EventStreamError

    response = getattr(exc, "response", {}) or {}
    code = str(response.get("Error", {}).get("Code") or type(exc).__name__)
    if isinstance(exc, EventStreamError):
        return "error", code, None
    original = response.get("OriginalStatusCode")
    if code == "ModelError" and original:
        message = str(response.get("OriginalMessage") or "")
        status, container_code = error_outcome(int(original), message.encode())
        return status, container_code, int(original)
    http_status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    status_kind: RequestStatus = "rejected" if http_status in REJECTION_CODES else "error"
    return status_kind, code, http_status
