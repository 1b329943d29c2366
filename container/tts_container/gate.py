"""Admission gate: a bound on in-flight requests (queued + executing) over HTTP and WebSocket.

`InFlight` is the shared count; the WebSocket session takes a slot per request it synthesizes.
`AdmissionGate` is a plain ASGI middleware for ``POST /invocations``: beyond the bound it answers
at once ``503 {"error": "queue_saturated", "queue_depth": N, "max_queue_depth": M}``; an admitted
request holds its slot until the response ends, fails or the client goes away. Once the server
drains for shutdown it admits nothing: ``503 {"error": "shutting_down", ...}``, connection closed.
Both run on the event loop thread only, so the count needs no lock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tts_container.errors import error_body, error_headers
from tts_container.request import is_valid_request_id, new_request_id

SHUTTING_DOWN = "shutting_down"


class InFlight:
    """Requests queued or executing; ``max_depth`` 0 means unbounded."""

    def __init__(self, max_depth: int = 0) -> None:
        self.max_depth = max_depth
        self.depth = 0
        self.peak = 0  # the most ever in flight at once: never above max_depth when bounded
        self.admitting = True

    def try_acquire(self) -> bool:
        if not self.admitting or (self.max_depth and self.depth >= self.max_depth):
            return False
        self.depth += 1
        self.peak = max(self.peak, self.depth)
        return True

    def stop_admitting(self) -> None:
        """From now on every `try_acquire` fails (shutdown); slots held are released as usual."""
        self.admitting = False

    def release(self) -> None:
        if self.depth <= 0:
            raise RuntimeError("InFlight.release() without a matching acquire")
        self.depth -= 1

    def saturated_body(self) -> dict[str, Any]:
        return {
            "error": "queue_saturated",
            "queue_depth": self.depth,
            "max_queue_depth": self.max_depth,
        }

    def refusal(self) -> tuple[str, str, dict[str, Any]]:
        """Why `try_acquire` failed: error code, detail and the extra fields of the error."""
        if not self.admitting:
            return SHUTTING_DOWN, "the server is shutting down; retry elsewhere", {}
        extra = self.saturated_body()
        del extra["error"]
        detail = f"{self.depth} requests in flight, the bound is {self.max_depth}"
        return "queue_saturated", detail, extra


RejectHook = Callable[[str, float], None]


class AdmissionGate:
    """ASGI middleware that admits ``POST`` requests to ``paths`` only while in-flight < bound."""

    def __init__(
        self,
        app: ASGIApp,
        in_flight: InFlight,
        paths: Collection[str] = ("/invocations",),
        on_reject: RejectHook | None = None,
    ) -> None:
        self.app = app
        self.in_flight = in_flight
        self.paths = frozenset(paths)
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        if not self.in_flight.try_acquire():
            await self._reject(scope, send, started)
            return

        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight.release()

        async def send_and_release(message: Message) -> None:
            try:
                await send(message)
            finally:
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    release()

        try:
            await self.app(scope, receive, send_and_release)
        finally:
            release()

    async def _reject(self, scope: Scope, send: Send, started: float) -> None:
        request_id = _header(scope, b"x-request-id")
        if not is_valid_request_id(request_id):
            request_id = new_request_id()
        if self.in_flight.admitting:
            # the contract's exact 503 body
            body = json.dumps(self.in_flight.saturated_body()).encode()
            headers = error_headers(body, request_id=str(request_id))
        else:
            code, detail, extra = self.in_flight.refusal()
            body = error_body(code, detail, extra)
            headers = error_headers(body, request_id=str(request_id), close=True)
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [*headers, (b"retry-after", b"1")],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
        if self.on_reject is not None:
            self.on_reject(str(request_id), time.perf_counter() - started)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None
