"""Transports: how one worker sends requests to an endpoint and reports bytes to a timer.

A transport owns what workers share (an HTTP client, an AWS client); a session is one worker's
connection. Every transport reports through
:class:`~pytest_tts_scaling.core.records.StreamTimer`, so TTFAB means the same thing on all of them.
"""

from __future__ import annotations

import abc
import json
import socket
import ssl
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from pytest_tts_scaling.core.records import (
    REJECTION_CODES,
    NetworkError,
    RequestSpec,
    RequestStatus,
    StreamTimer,
)

# SageMaker ends an invocation after 60 s; no request is given longer anywhere.
INVOCATION_LIMIT_S = 60.0


def named(exc: BaseException) -> BaseException:
    """A socket-level failure as the record names it (`dns_error`, `tls_error`): the transport
    knows the socket module's exceptions, the record (pure, in core/) does not."""
    if isinstance(exc, socket.gaierror):
        return NetworkError("dns_error", str(exc))
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return NetworkError("tls_error", str(exc))
    return exc


class Session(Protocol):
    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        """Send one request; call timer.started/body/finished. Must not raise for HTTP errors."""


class Transport(abc.ABC):
    name: str
    # What opening or using a session raises when the endpoint, not the code, is at fault: the
    # load engine records it as a failed request and reopens.
    connection_errors: tuple[type[BaseException], ...] = (OSError,)

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:  # noqa: B027 - most transports hold nothing shared
        """Release what the workers shared."""

    @abc.abstractmethod
    def session(self) -> AbstractAsyncContextManager[Session]:
        """One worker's connection, opened before its first request."""


def error_outcome(http_status: int, body: bytes) -> tuple[RequestStatus, str]:
    """Classify a non-200 answer: rejections (503/429/408) apart from errors.

    The code is `http_<status>`, followed by the JSON body's own code where it has one
    (`http_503:queue_saturated`).
    """
    status: RequestStatus = "rejected" if http_status in REJECTION_CODES else "error"
    code = f"http_{http_status}"
    parsed = _json_object(body)
    if isinstance(parsed.get("error"), str):
        code += f":{parsed['error']}"
    return status, code


def admission_bound(body: bytes) -> int | None:
    """`max_queue_depth` from an admission gate's 503 body (docs/container.md), None if it names
    none."""
    bound = _json_object(body).get("max_queue_depth")
    return bound if isinstance(bound, int) and not isinstance(bound, bool) and bound >= 0 else None


def _json_object(body: bytes) -> dict[str, object]:
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}
