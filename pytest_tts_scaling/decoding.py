"""Turning response bytes into payload bytes: raw audio, or audio carried inside JSON.

A decoder is fed the body as it arrives and says how many payload bytes each piece made
available, so TTFAB is the arrival of the first piece that carried payload: for raw audio the
first byte past a WAV header; for JSON lines the line whose field held the first audio; for a
single JSON body, its end (no audio can be played before it is whole).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import jmespath
import jmespath.exceptions


class DecodeError(ValueError):
    """The response did not have the shape the scenario promised."""


class Decoder(Protocol):
    def feed(self, data: bytes) -> int:
        """Payload bytes made available by this piece of the body."""

    def finish(self) -> int:
        """Payload bytes made available once the body is complete."""


@dataclass(frozen=True)
class ResponseFormat:
    """How a response carries its payload (SPEC §9)."""

    kind: Literal["audio", "json"] = "audio"
    field: str | None = None
    encoding: Literal["base64", "none"] = "base64"
    streamed: bool = True
    header_bytes: int = 0

    def decoder(self) -> Decoder:
        if self.kind == "audio":
            return RawAudioDecoder(self.header_bytes)
        assert self.field is not None
        return JsonFieldDecoder(compile_field(self.field), self.encoding, self.streamed)


def compile_field(expression: str) -> Any:
    try:
        return jmespath.compile(expression)
    except jmespath.exceptions.ParseError as exc:
        reason = str(exc).splitlines()[0]
        raise ValueError(f"not a JMESPath expression: {expression!r} ({reason})") from None


class RawAudioDecoder:
    """The body is audio, after an optional fixed-size header (a streaming WAV header)."""

    def __init__(self, header_bytes: int = 0):
        self.header_left = header_bytes

    def feed(self, data: bytes) -> int:
        skip = min(self.header_left, len(data))
        self.header_left -= skip
        return len(data) - skip

    def finish(self) -> int:
        return 0


class JsonFieldDecoder:
    """JSON lines (one object per line, streamed) or one JSON body, payload at a JMESPath."""

    def __init__(self, field: Any, encoding: str, streamed: bool):
        self.field = field
        self.encoding = encoding
        self.streamed = streamed
        self.buffer = bytearray()

    def feed(self, data: bytes) -> int:
        self.buffer += data
        if not self.streamed:
            return 0
        total = 0
        while (end := self.buffer.find(b"\n")) >= 0:
            line = bytes(self.buffer[:end]).strip()
            del self.buffer[: end + 1]
            if line:
                total += self._payload(line)
        return total

    def finish(self) -> int:
        rest = bytes(self.buffer).strip()
        self.buffer.clear()
        return self._payload(rest) if rest else 0

    def _payload(self, text: bytes) -> int:
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise DecodeError(f"response is not JSON: {exc}") from None
        value = self.field.search(document)
        if value is None:
            return 0
        if self.encoding == "base64":
            if not isinstance(value, str):
                raise DecodeError(f"{self.field.expression} is {type(value).__name__}, not base64")
            try:
                return len(base64.b64decode(value, validate=True))
            except binascii.Error as exc:
                raise DecodeError(f"{self.field.expression} is not base64: {exc}") from None
        return len(json.dumps(value).encode())
