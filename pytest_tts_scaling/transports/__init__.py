"""Transports: how one worker sends requests to an endpoint and reports bytes to a timer.

A transport owns what workers share (an HTTP client, an AWS client); a session is one worker's
connection. Every transport reports through :class:`~pytest_tts_scaling.records.StreamTimer`, so
TTFAB means the same thing on all of them.
"""

from __future__ import annotations

import abc
import json
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from pytest_tts_scaling.records import REJECTION_CODES, RequestSpec, Status, StreamTimer

# SageMaker ends an invocation after 60 s; no request is given longer anywhere.
INVOCATION_LIMIT_S = 60.0


class Session(Protocol):
    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        """Send one request; call timer.started/body/finished. Must not raise for HTTP errors."""


class Transport(abc.ABC):
    name: str

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:  # noqa: B027 - most transports hold nothing shared
        """Release what the workers shared."""

    @abc.abstractmethod
    def session(self) -> AbstractAsyncContextManager[Session]:
        """One worker's connection, opened before its first request."""


def error_outcome(http_status: int, body: bytes) -> tuple[Status, str]:
    """Classify a non-200 answer: rejections (503/429/408) apart from errors, with the JSON code."""
    status: Status = "rejected" if http_status in REJECTION_CODES else "error"
    code = f"http_{http_status}"
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return status, code
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        code = parsed["error"]
    return status, code
