"""uvicorn protocols whose own refusals use the contract's JSON error shape
(docs/container.md#refusals).

uvicorn's h11 protocol answers a request it cannot parse (protocol garbage, a broken chunked body,
a head over the size limit) with a plain-text 400 and closes at once; bytes the client still sends
then turn the close into a reset that can destroy the answer before the client reads it.
`JsonErrorH11Protocol` answers these with a JSON 4xx (h11's status hint: 400, or 431 for a
head too large) and closes lingering: it sends FIN, discards what still arrives for a moment, then
closes. When the app is reading the broken request's body it sees a disconnect; when the response
has already started nothing more can be said, so the connection just closes.

`JsonErrorWebSocketProtocol` does the same for the websockets library's plain-text handshake
rejections (a missing key, a wrong version, a refused route).
"""

from __future__ import annotations

import http
import logging
import sys
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.datastructures import Headers
from websockets.http11 import Response
from websockets.server import ServerProtocol

from tts_container.errors import error_body, error_headers

log = logging.getLogger(__name__)

LINGER_S = 2.0
WEBSOCKET_CODES = {
    400: "bad_websocket_handshake",
    403: "websocket_refused",
    426: "upgrade_required",
    431: "headers_too_large",
    500: "internal_error",
}


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")


def _client_error_status(hint: object) -> int:
    """h11's hint when it is a 4xx; anything else a plain 400 (input never earns a 5xx)."""
    return hint if isinstance(hint, int) and 400 <= hint < 500 else 400


class JsonErrorH11Protocol(H11Protocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering = False

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # after a refusal: read and drop, so closing sends no reset over the answer
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this while handling h11's RemoteProtocolError."""
        exc = sys.exc_info()[1]
        status = _client_error_status(getattr(exc, "error_status_hint", 400))
        detail = f"invalid HTTP request: {exc}" if exc is not None else msg
        self.refuse(status, "bad_http_request", detail)

    def refuse(self, status: int, code: str, detail: str) -> None:
        """Answer ``status`` with the JSON error if no response started, then close lingering."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app reading this body sees the client gone
            cycle.message_event.set()
        log.debug("refused a request from %s: %s %s (%s)", self.client, status, code, detail)
        # IDLE: between requests (garbage, a broken head); SEND_RESPONSE: the request's body broke
        # before any answer. Otherwise an answer started or ended already: nothing more to say.
        answerable = self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE)
        if answerable and not self.transport.is_closing():
            body = error_body(code, detail)
            headers = b"".join(
                name + b": " + value + b"\r\n" for name, value in error_headers(body, close=True)
            )
            self.transport.write(_status_line(status) + headers + b"\r\n" + body)
        self.linger_close()

    def linger_close(self) -> None:
        if self.lingering or self.transport.is_closing():
            return
        self.lingering = True
        self._unset_keepalive_if_required()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.transport.resume_reading()
        self.loop.call_later(LINGER_S, self.transport.close)  # the client's FIN closes sooner


class JsonRejectServerProtocol(ServerProtocol):
    """websockets' server handshake, with JSON bodies on its rejections."""

    def reject(self, status: http.HTTPStatus | int, text: str) -> Response:
        code = http.HTTPStatus(status)
        error = WEBSOCKET_CODES.get(code.value, "websocket_refused")
        detail = text.strip() or f"WebSocket handshake refused: {code.value} {code.phrase}"
        body = error_body(error, detail)
        headers = Headers([(k.decode(), v.decode()) for k, v in error_headers(body, close=True)])
        return Response(code.value, code.phrase, headers, body)


class JsonErrorWebSocketProtocol(WebSocketsSansIOProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = JsonRejectServerProtocol(
            extensions=self.conn.available_extensions,
            max_size=self.config.ws_max_size,
            logger=self.conn.logger,
        )
