"""`response-stream` against a URL: POST /invocations, read the chunked body as it arrives.

Each worker owns one keep-alive HTTP/1.1 connection (h11 over a small asyncio protocol that
stamps each piece of the answer as it is read). A shared connection pool would scan every
connection per request, which at hundreds of streams costs more than the measurement can afford
and delays the very bytes being timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import h11

from pytest_tts_scaling.core.records import ConnectTimeout, RequestSpec, StreamTimer
from pytest_tts_scaling.load.transports import (
    INVOCATION_LIMIT_S,
    Session,
    Transport,
    admission_bound,
    error_outcome,
)

CONNECT_TIMEOUT_S = 10.0
# Bytes read but not yet parsed beyond which the socket is not read (flow control).
MAX_BUFFERED = 1 << 20


class HttpStreamTransport(Transport):
    name = "response-stream"

    def __init__(self, base_url: str, *, timeout_s: float = INVOCATION_LIMIT_S):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http:// or https:// URL, got {base_url!r}")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.host_header = parts.netloc
        self.target = parts.path.rstrip("/") + "/invocations"
        self.timeout_s = timeout_s

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        session = _HttpSession(self)
        try:
            yield session
        finally:
            session.close()


class _TimedStream(asyncio.Protocol):
    """The connection's bytes as the socket delivered them, each piece with the moment it was
    read (the read callbacks run first in each turn of the event loop, so the time is when the
    bytes left the kernel, not when this worker's coroutine got round to parsing them: at
    hundreds of streams answering at once that difference is the TTFAB error)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pieces: deque[tuple[int, bytes]] = deque()
        self.buffered = 0
        self.closed = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.pieces.append((time.perf_counter_ns(), data))
        self.buffered += len(data)
        if self.buffered > MAX_BUFFERED and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def read(self) -> tuple[int, bytes]:
        """The next piece and when it was read; b"" once the peer has closed."""
        while not self.pieces:
            if self.closed:
                if self.error is not None:
                    raise self.error
                return time.perf_counter_ns(), b""
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        at, data = self.pieces.popleft()
        self.buffered -= len(data)
        if self.buffered <= MAX_BUFFERED // 2 and self.transport is not None:
            self.transport.resume_reading()
        return at, data

    def write(self, data: bytes) -> None:
        if self.transport is None or self.closed:
            raise ConnectionResetError("the connection is closed")
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _HttpSession:
    def __init__(self, transport: HttpStreamTransport):
        self.transport = transport
        self.stream: _TimedStream | None = None
        self.connection: h11.Connection | None = None

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        self.stream = self.connection = None

    async def _connect(self) -> None:
        t = self.transport
        context = ssl.create_default_context() if t.tls else None
        loop = asyncio.get_running_loop()
        try:
            _, self.stream = await asyncio.wait_for(
                loop.create_connection(_TimedStream, t.host, t.port, ssl=context),
                CONNECT_TIMEOUT_S,
            )
        except TimeoutError:
            raise ConnectTimeout(
                f"no connection to {t.host}:{t.port} in {CONNECT_TIMEOUT_S:g} s"
            ) from None
        self.connection = h11.Connection(h11.CLIENT)

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        body = request.payload
        try:
            async with asyncio.timeout(self.transport.timeout_s):
                if self.connection is None or self.connection.our_state is not h11.IDLE:
                    self.close()
                    await self._connect()
                await self._exchange(request, body, timer)
        except TimeoutError:
            self.close()
            timer.finished("timeout", "invocation_timeout")
        except (OSError, h11.ProtocolError, asyncio.IncompleteReadError) as exc:
            self.close()
            timer.failed(exc)

    async def _exchange(self, request: RequestSpec, body: bytes, timer: StreamTimer) -> None:
        connection, stream = self.connection, self.stream
        assert connection is not None
        assert stream is not None
        head = h11.Request(
            method="POST",
            target=self.transport.target,
            headers=[
                ("Host", self.transport.host_header),
                ("Content-Type", "application/json"),
                ("Accept", "audio/*"),
                ("Content-Length", str(len(body))),
                ("X-Request-Id", request.request_id),
            ],
        )
        payload = connection.send(head) + connection.send(h11.Data(data=body))
        payload += connection.send(h11.EndOfMessage())
        timer.started()
        stream.write(payload)
        status = 0
        error_body = bytearray()
        read_at = 0
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                read_at, data = await stream.read()
                connection.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                timer.http_status = status
            elif isinstance(event, h11.Data):
                if status == 200:
                    timer.body(bytes(event.data), at_ns=read_at)
                else:
                    error_body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise asyncio.IncompleteReadError(b"", None)
        if status == 200:
            timer.finished("ok")
        else:
            outcome, code = error_outcome(status, bytes(error_body))
            if outcome == "rejected":
                timer.max_queue_depth = admission_bound(bytes(error_body))
            timer.finished(outcome, code)
        with contextlib.suppress(h11.LocalProtocolError):
            connection.start_next_cycle()
