"""`bidi` against a URL: one WebSocket session per worker, many requests over it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from pytest_tts_scaling.core.records import RequestSpec, StreamTimer
from pytest_tts_scaling.load.transports import (
    INVOCATION_LIMIT_S,
    Session,
    Transport,
    admission_bound,
    named,
)

BIDI_PATH = "/invocations-bidirectional-stream"
QUEUE_SATURATED = "queue_saturated"


class WebSocketTransport(Transport):
    name = "bidi"
    connection_errors = (OSError, WebSocketException)

    def __init__(self, base_url: str, *, timeout_s: float = INVOCATION_LIMIT_S):
        self.url = "ws" + base_url.rstrip("/").removeprefix("http") + BIDI_PATH
        self.timeout_s = timeout_s

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        async with connect(self.url, max_size=None, open_timeout=10) as connection:
            yield _WebSocketSession(connection, self.timeout_s)


class _WebSocketSession:
    def __init__(self, connection: ClientConnection, timeout_s: float):
        self.connection = connection
        self.timeout_s = timeout_s

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        answered = False
        try:
            async with asyncio.timeout(self.timeout_s):
                timer.started()
                await self.connection.send(request.payload.decode())
                while True:
                    frame = await self.connection.recv()
                    answered = True
                    if isinstance(frame, bytes):
                        timer.body(frame)
                        continue
                    if control_frame(frame, timer):
                        return
        except TimeoutError:
            timer.finished("timeout", "invocation_timeout")
            raise  # the session is mid-stream and cannot carry another request
        except ValueError as exc:
            timer.finished("error", f"decode_error: {exc}")
            raise
        except (WebSocketException, OSError) as exc:
            timer.failed(named(exc), answered=answered)
            raise


def control_frame(frame: str, timer: StreamTimer) -> bool:
    """Act on one text frame of a session; True when it ended the request (the gate's error
    frame is a rejection, with the bound it names). Raises ValueError for a frame not JSON."""
    message = json.loads(frame)
    kind = message.get("type")
    if kind == "synthesis_complete":
        timer.finished("ok")
        return True
    if kind == "error":
        code = str(message.get("error", "error"))
        if code == QUEUE_SATURATED:
            timer.max_queue_depth = admission_bound(frame.encode())
        timer.finished("rejected" if code == QUEUE_SATURATED else "error", code)
        return True
    return False
