"""`response-stream` against a URL: POST /invocations, read the chunked body as it arrives.

Each worker owns one keep-alive HTTP/1.1 connection (h11 over asyncio streams). A shared
connection pool would scan every connection per request, which at hundreds of streams costs more
than the measurement can afford and delays the very bytes being timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import h11

from pytest_tts_scaling.records import ConnectTimeout, RequestSpec, StreamTimer
from pytest_tts_scaling.transports import (
    INVOCATION_LIMIT_S,
    Session,
    Transport,
    admission_bound,
    error_outcome,
)

READ_SIZE = 65536
CONNECT_TIMEOUT_S = 10.0


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


class _HttpSession:
    def __init__(self, transport: HttpStreamTransport):
        self.transport = transport
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.connection: h11.Connection | None = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = self.connection = None

    async def _connect(self) -> None:
        t = self.transport
        context = ssl.create_default_context() if t.tls else None
        try:
            self.reader, self.writer = await asyncio.wait_for(
                asyncio.open_connection(t.host, t.port, ssl=context, limit=READ_SIZE * 4),
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
        connection, reader, writer = self.connection, self.reader, self.writer
        assert connection is not None
        assert reader is not None
        assert writer is not None
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
        writer.write(payload)
        await writer.drain()
        status = 0
        error_body = bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(READ_SIZE)
                connection.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                timer.http_status = status
            elif isinstance(event, h11.Data):
                if status == 200:
                    timer.body(bytes(event.data))
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
