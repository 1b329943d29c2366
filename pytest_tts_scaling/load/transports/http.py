"""`response-stream` against a URL: POST /invocations (or the scenario's method, path and
headers), read the body as it arrives.

Each worker owns one keep-alive HTTP/1.1 connection: a small protocol that parses the answer
(httptools, C) as it is read and hands each body piece to the request's timer, stamped with
when its bytes arrived. Over plain HTTP that is the kernel's own arrival time (`arrival`), so
the TTFAB of hundreds of streams answering at once does not wait for the event loop to get
round to each socket; over TLS it is when the loop read them. No coroutine wakes per piece, and
no pool is shared: a shared pool scans every connection per request, which at that scale delays
the very bytes being timed.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol
from urllib.parse import urlsplit

import httptools

from pytest_tts_scaling.core.decoding import DecodeError
from pytest_tts_scaling.core.records import ConnectTimeout, RequestSpec, StreamTimer
from pytest_tts_scaling.load.transports import (
    INVOCATION_LIMIT_S,
    Session,
    Transport,
    admission_bound,
    error_outcome,
    named,
)
from pytest_tts_scaling.load.transports.arrival import StampedConnection, open_stamped

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
        # The scenario's request path is joined to the URL's own path.
        self.base_path = parts.path.rstrip("/")
        self.timeout_s = timeout_s

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        session = _HttpSession(self)
        try:
            yield session
        finally:
            session.close()


class _Exchange:
    """One answer being read: its timer, the error body of a non-200, and when it ended."""

    def __init__(self, timer: StreamTimer) -> None:
        self.timer = timer
        # The answer's status once its headers are in (0 before; an interim 1xx is not it).
        self.status = 0
        self.error_body = bytearray()
        # The answer's body has a declared end (Content-Length or chunked); without one it ends
        # when the server closes the connection.
        self.framed = False
        # The body did not have the shape the scenario promised; the rest of it is not fed.
        self.decode_error: DecodeError | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class _Wire(Protocol):
    """The connection's transport: a `StampedConnection`, or asyncio's over TLS."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class _AnswerProtocol(asyncio.Protocol):
    """The connection: parses each answer as its bytes arrive and reports to its timer."""

    def __init__(self) -> None:
        self.transport: _Wire | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: _Exchange | None = None
        # False once the connection is gone, closed, or said it will not carry another answer.
        self.reusable = True
        self._arrived_at = 0
        self._kernel_stamped = False

    def connection_made(self, transport: asyncio.BaseTransport | StampedConnection) -> None:
        assert isinstance(transport, asyncio.Transport | StampedConnection)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        """asyncio's transport (TLS): the bytes are timed when the loop read them."""
        self.data_arrived(data, time.perf_counter_ns(), kernel_stamped=False)

    def data_arrived(self, data: bytes | memoryview, at_ns: int, kernel_stamped: bool) -> None:
        self._arrived_at, self._kernel_stamped = at_ns, kernel_stamped
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.reusable = False
            self._end(ConnectionResetError(f"the answer does not parse as HTTP/1.1: {exc}"))

    def eof_received(self) -> bool:
        self._gone(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone(exc)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        exchange = self.exchange
        if exchange is not None and name.lower() in (b"content-length", b"transfer-encoding"):
            exchange.framed = True

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        status = self.parser.get_status_code()
        if exchange is not None and status >= 200:  # an interim 1xx is not the answer
            exchange.status = status
            exchange.timer.http_status = status

    def on_body(self, body: bytes) -> None:
        exchange = self.exchange
        if exchange is None or exchange.decode_error is not None:
            return
        if exchange.status != 200:
            exchange.error_body += body
            return
        try:
            exchange.timer.body(body, at_ns=self._arrived_at, kernel_stamped=self._kernel_stamped)
        except DecodeError as exc:
            exchange.decode_error = exc
            return
        if exchange.timer.hung_up_ns is not None:
            self._hang_up()

    def _hang_up(self) -> None:
        """The listener has heard enough: the answer ends here and the connection is closed, as
        a client that barges in closes its stream (HTTP/1.1 has no other way to cancel)."""
        self._end(None)
        self.close()

    def on_message_complete(self) -> None:
        if self.exchange is not None and not self.exchange.status:
            return  # the end of an interim 1xx: the answer follows
        self.reusable = self.reusable and self.parser.should_keep_alive()
        self._end(None)

    def _gone(self, exc: Exception | None) -> None:
        self.reusable = False
        exchange = self.exchange
        if exc is None and exchange is not None and exchange.status and not exchange.framed:
            self._end(None)  # a body without a declared length ends with the connection
            return
        self._end(exc or asyncio.IncompleteReadError(b"", None))

    def _end(self, error: Exception | None) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is None or exchange.done.done():
            return
        if error is None:
            exchange.done.set_result(None)
        else:
            exchange.done.set_exception(error)

    def begin(self, payload: bytes, exchange: _Exchange) -> None:
        if self.transport is None or not self.reusable:
            raise ConnectionResetError("the connection is closed")
        self.exchange = exchange
        exchange.timer.started()
        self.transport.write(payload)

    def close(self) -> None:
        self.exchange = None  # whatever still arrives belongs to no request
        self.reusable = False
        if self.transport is not None:
            self.transport.close()


class _HttpSession:
    def __init__(self, transport: HttpStreamTransport):
        self.transport = transport
        self.connection: _AnswerProtocol | None = None

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.connection = None

    async def _connect(self) -> _AnswerProtocol:
        t = self.transport
        loop = asyncio.get_running_loop()
        opening = (
            loop.create_connection(
                _AnswerProtocol, t.host, t.port, ssl=ssl.create_default_context()
            )
            if t.tls
            else open_stamped(t.host, t.port, _AnswerProtocol)
        )
        try:
            _, connection = await asyncio.wait_for(opening, CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise ConnectTimeout(
                f"no connection to {t.host}:{t.port} in {CONNECT_TIMEOUT_S:g} s"
            ) from None
        self.connection = connection
        return connection

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        try:
            async with asyncio.timeout(self.transport.timeout_s):
                connection = self.connection
                if connection is None or not connection.reusable:
                    self.close()
                    connection = await self._connect()
                await self._exchange(connection, request, timer)
        except TimeoutError:
            self.close()
            timer.finished("timeout", "invocation_timeout")
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.close()
            timer.failed(named(exc))
        except asyncio.CancelledError:
            self.close()  # cut mid-answer: the connection's state is unknown
            raise

    async def _exchange(
        self, connection: _AnswerProtocol, request: RequestSpec, timer: StreamTimer
    ) -> None:
        body = request.payload
        t = self.transport
        shape = request.http
        headers = shape.sent_headers(
            {
                "Content-Type": "application/json",
                "Accept": "audio/*",
                "X-Request-Id": request.request_id,
            }
        )
        head = (
            f"{shape.method} {t.base_path}{shape.path} HTTP/1.1\r\nHost: {t.host_header}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            + f"Content-Length: {len(body)}\r\n\r\n"
        )
        exchange = _Exchange(timer)
        connection.begin(head.encode("latin-1") + body, exchange)
        await exchange.done
        if exchange.decode_error is not None:
            timer.finished("error", f"decode_error: {exchange.decode_error}")
            return
        if exchange.status == 200:
            timer.finished("ok")
            return
        outcome, code = error_outcome(exchange.status, bytes(exchange.error_body))
        if outcome == "rejected":
            timer.max_queue_depth = admission_bound(bytes(exchange.error_body))
        timer.finished(outcome, code)
