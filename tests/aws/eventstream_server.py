"""A local stand-in for SageMaker's InvokeEndpointWithResponseStream on 127.0.0.1.

It answers `POST /endpoints/NAME/invocations-response-stream` with an
`application/vnd.amazon.eventstream` body over HTTP/1.1 chunked encoding, framing each event
the way botocore decodes it: prelude (total and header lengths, CRC32), string headers
(`:event-type`, `:message-type`, …), payload, message CRC32. What it sends is scripted per
endpoint name, with a delay before each message, so a test can tell headers from audio.
"""

from __future__ import annotations

import binascii
import json
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string-valued headers (type 7)."""
    encoded = b"".join(
        struct.pack("!B", len(name))
        + name.encode()
        + b"\x07"
        + struct.pack("!H", len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    message = prelude + struct.pack("!I", binascii.crc32(prelude)) + encoded + payload
    return message + struct.pack("!I", binascii.crc32(message))


def payload_part(data: bytes) -> bytes:
    return encode_message(
        {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        },
        data,
    )


def stream_exception(kind: str, message: str, error_code: str | None = None) -> bytes:
    body: dict[str, str] = {"Message": message}
    if error_code:
        body["ErrorCode"] = error_code
    return encode_message(
        {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps(body).encode(),
    )


@dataclass
class Script:
    """(delay_s, message bytes) in order; or an HTTP error answered at once."""

    messages: list[tuple[float, bytes]] = field(default_factory=list)
    error_status: int | None = None
    error_type: str | None = None
    error_body: dict[str, Any] | None = None


def gate_full(max_queue_depth: int) -> Script:
    """SageMaker's answer when the container's admission gate is full: its 503 inside a
    ModelError (424), the container's JSON body as the original message."""
    original = {
        "error": "queue_saturated",
        "queue_depth": max_queue_depth,
        "max_queue_depth": max_queue_depth,
    }
    return Script(
        error_status=424,
        error_type="ModelError",
        error_body={
            "Message": "Received server error (503) from primary",
            "OriginalStatusCode": 503,
            "OriginalMessage": json.dumps(original),
        },
    )


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class EventStreamServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.scripts: dict[str, Script] = {}
        self.received: list[Received] = []
        self.in_flight = 0  # requests being answered now, as CloudWatch's concurrency counts them
        self._counting = threading.Lock()
        self._switch: tuple[str, int, Script] | None = None

    def switch_after(self, name: str, requests: int, script: Script) -> None:
        """Answer endpoint `name` with `script` from the `requests`-th request on from now: a
        change of behaviour tied to the traffic the server sees, not to a timer."""
        with self._counting:
            self._switch = (name, len(self.received) + requests, script)

    def received_one(self, received: Received) -> None:
        with self._counting:
            self.received.append(received)
            if self._switch is not None and len(self.received) >= self._switch[1]:
                name, _, script = self._switch
                self.scripts[name] = script
                self._switch = None

    def count(self, delta: int) -> None:
        with self._counting:
            self.in_flight += delta

    @property
    def url(self) -> str:
        port = self.server_address[1]
        return f"http://127.0.0.1:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EventStreamServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.server.count(1)
        try:
            self._answer()
        finally:
            self.server.count(-1)

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.server.received_one(Received(self.path, dict(self.headers), body))
        parts = self.path.strip("/").split("/")
        script = self.server.scripts.get(parts[1] if len(parts) > 1 else "", Script())
        if script.error_status is not None:
            data = json.dumps(script.error_body or {}).encode()
            self.send_response(script.error_status)
            self.send_header("Content-Type", "application/json")
            self.send_header("x-amzn-ErrorType", script.error_type or "InternalFailure")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("X-Amzn-SageMaker-Content-Type", "audio/pcm")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            for delay, message in script.messages:
                time.sleep(delay)
                self.wfile.write(f"{len(message):x}\r\n".encode() + message + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


@contextmanager
def event_stream_server() -> Iterator[EventStreamServer]:
    server = EventStreamServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
