"""Turning response bytes into payload bytes: raw audio, or audio carried inside JSON or events.

A decoder is fed the body as it arrives and says how many payload bytes each piece made
available, so TTFAB is the arrival of the first piece that carried payload: for raw audio the
first byte past a WAV header; for JSON lines the line whose field held the first audio; for
server-sent events the event whose JSON held it; for a single JSON body, its end (no audio can
be played before it is whole).

Whether audio comes behind a RIFF/WAVE header is read from the bytes, never from the format the
request asked for: a server may answer a pcm request with WAV, and a header can arrive in
pieces, carry extra chunks (LIST, fact) before its data chunk, or start again for each segment.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import jmespath
import jmespath.exceptions


class DecodeError(ValueError):
    """The response did not have the shape the scenario promised."""


class Decoder(Protocol):
    @property
    def wav_bytes_per_second(self) -> int | None:
        """Bytes per second of audio as a WAV header declared it; None where none did."""

    @property
    def payload(self) -> bytearray:
        """The audio bytes so far (empty for a payload that is not audio), kept for the audio
        checks, which read the answer's levels once it has ended."""

    def feed(self, data: bytes) -> int:
        """Payload bytes made available by this piece of the body."""

    def finish(self) -> int:
        """Payload bytes made available once the body is complete."""


@dataclass(frozen=True)
class ResponseFormat:
    """How a response carries its payload (docs/workloads.md)."""

    kind: Literal["audio", "json", "sse"] = "audio"
    field: str | None = None
    encoding: Literal["base64", "none"] = "base64"
    streamed: bool = True
    # sse: the event (its `event:` name, or its JSON's "type") that ends the answer.
    end_event: str | None = None

    def decoder(self) -> Decoder:
        if self.kind == "audio":
            return RawAudioDecoder()
        assert self.field is not None
        if self.kind == "sse":
            return EventStreamDecoder(compile_field(self.field), self.encoding, self.end_event)
        return JsonFieldDecoder(compile_field(self.field), self.encoding, self.streamed)


def compile_field(expression: str) -> Any:
    try:
        return jmespath.compile(expression)
    except jmespath.exceptions.ParseError as exc:
        reason = str(exc).splitlines()[0]
        raise ValueError(f"not a JMESPath expression: {expression!r} ({reason})") from None


RIFF, WAVE, DATA, FMT = b"RIFF", b"WAVE", b"data", b"fmt "
# A streaming WAV header cannot know its data size: writers put 0 or 0xFFFFFFFF there.
UNKNOWN_SIZES = frozenset({0, 0xFFFFFFFF})
CHUNK_ID = re.compile(rb"[ -~]{4}")


class WavSkipper:
    """Counts the audio sample bytes of a byte stream, dropping RIFF/WAVE headers from it.

    A header is looked for at the start and after each data chunk of known size ends (servers
    that send one WAV file per segment); the chunks before `data` are skipped whatever they are,
    and any piece of a header may arrive split across reads. Bytes that do not start with
    `RIFF....WAVE` are audio as they are.
    """

    def __init__(self) -> None:
        self.pending = bytearray()
        self.state = "start"  # start | chunks | skip | data | after | raw
        self.left: int | None = None  # bytes left in the current skipped or data chunk
        self.wav_bytes_per_second: int | None = None
        self.payload = bytearray()

    def feed(self, data: bytes) -> int:
        if self.state == "raw" or (self.state == "data" and self.left is None):
            self.payload += data
            return len(data)  # the hot path: audio with no header left to look for
        self.pending += data
        audio = 0
        while self.pending and (step := self._step()) is not None:
            audio += step
        return audio

    def finish(self) -> int:
        """Bytes still held back while undecided are audio if no header could start there."""
        held = len(self.pending) if self.state in ("start", "after") else 0
        if held:
            self.payload += self.pending
        self.pending.clear()
        return held

    def _step(self) -> int | None:
        """Consume one piece of `pending`; its audio byte count, or None when more is needed."""
        buf = self.pending
        if self.state in ("raw", "data"):
            take = len(buf) if self.left is None else min(self.left, len(buf))
            self.payload += buf[:take]
            del buf[:take]
            if self.left is not None:
                self.left -= take
                if self.left == 0:
                    self.state, self.left = "after", None
            return take
        if self.state in ("start", "after"):
            head = bytes(buf[:12])
            maybe_riff = RIFF.startswith(head[:4]) and WAVE.startswith(head[8:])
            if len(head) < 12 and (maybe_riff or (self.state == "after" and len(head) < 4)):
                return None  # could still be a header
            if head[:4] == RIFF and head[8:12] == WAVE:
                del buf[:12]
                self.state = "chunks"
                return 0
            if self.state == "after" and len(head) >= 4 and CHUNK_ID.fullmatch(head[:4]):
                self.state = "chunks"  # a chunk after the data (LIST at the end of a file)
                return 0
            self.state = "raw"
            return 0
        if self.state == "chunks":
            if len(buf) < 8:
                return None
            kind, (size,) = bytes(buf[:4]), struct.unpack("<I", buf[4:8])
            if kind == FMT:
                if len(buf) < 8 + min(size, 16):
                    return None
                self._read_fmt(bytes(buf[8 : 8 + min(size, 16)]))
            del buf[:8]
            if kind == DATA:
                self.state, self.left = "data", None if size in UNKNOWN_SIZES else size
            else:
                self.state, self.left = "skip", size + (size & 1)  # chunks are word-aligned
            return 0
        assert self.left is not None  # skipping a chunk
        take = min(self.left, len(buf))
        del buf[:take]
        self.left -= take
        if self.left == 0:
            self.state, self.left = "chunks", None
        return 0

    def _read_fmt(self, fmt: bytes) -> None:
        if len(fmt) < 16:
            return
        channels, rate, _, _, bits = struct.unpack("<HIIHH", fmt[2:16])
        self.wav_bytes_per_second = rate * channels * (bits // 8) or None


class RawAudioDecoder(WavSkipper):
    """The body is audio, behind a WAV header when the bytes carry one."""


class EmbeddedAudio:
    """A body that carries its audio as a byte stream of its own (base64 in JSON lines or in
    events), which may hold WAV headers too: `audio` counts and keeps it."""

    audio: WavSkipper

    @property
    def wav_bytes_per_second(self) -> int | None:
        return self.audio.wav_bytes_per_second

    @property
    def payload(self) -> bytearray:
        return self.audio.payload


class JsonFieldDecoder(EmbeddedAudio):
    """JSON lines (one object per line, streamed) or one JSON body, payload at a JMESPath."""

    def __init__(self, field: Any, encoding: str, streamed: bool):
        self.field = field
        self.encoding = encoding
        self.streamed = streamed
        self.buffer = bytearray()
        # base64 audio is a byte stream of its own, which may carry WAV headers too.
        self.audio = WavSkipper()

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
        return (self._payload(rest) if rest else 0) + self.audio.finish()

    def _payload(self, text: bytes) -> int:
        return field_payload(parse_json(text), self.field, self.encoding, self.audio)


def parse_json(text: bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DecodeError(f"response is not JSON: {exc}") from None


def field_payload(document: Any, field: Any, encoding: str, audio: WavSkipper) -> int:
    """Payload bytes the document holds at `field`: base64 audio fed to `audio`, or any value."""
    value = field.search(document)
    if value is None:
        return 0
    if encoding == "base64":
        if not isinstance(value, str):
            raise DecodeError(f"{field.expression} is {type(value).__name__}, not base64")
        try:
            decoded = base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise DecodeError(f"{field.expression} is not base64: {exc}") from None
        return audio.feed(decoded)
    return len(json.dumps(value).encode())


class EventStreamDecoder(EmbeddedAudio):
    """Server-sent events (text/event-stream) whose JSON data carries the payload at a JMESPath.

    An event is its `data:` lines up to a blank line. The answer ends with `end_event` (named by
    the event's `event:` field or its JSON's "type") or `data: [DONE]`; a stream that closes
    before its end event was cut short, and says so. Comments, `id:` and `retry:` are skipped.
    """

    def __init__(self, field: Any, encoding: str, end_event: str | None):
        self.field = field
        self.encoding = encoding
        self.end_event = end_event
        self.buffer = bytearray()
        self.data: list[bytes] = []
        self.event = b""
        self.ended = False
        self.audio = WavSkipper()

    def feed(self, data: bytes) -> int:
        self.buffer += data
        total = 0
        while (end := self.buffer.find(b"\n")) >= 0:
            line = bytes(self.buffer[:end]).rstrip(b"\r")
            del self.buffer[: end + 1]
            total += self._line(line)
        return total

    def finish(self) -> int:
        rest = bytes(self.buffer).rstrip(b"\r")
        self.buffer.clear()
        total = (self._line(rest) if rest else 0) + self._dispatch()
        if self.end_event is not None and not self.ended:
            raise DecodeError(f"the event stream ended before its {self.end_event!r} event")
        return total + self.audio.finish()

    def _line(self, line: bytes) -> int:
        if not line:
            return self._dispatch()
        name, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if name == b"data":
            self.data.append(value)
        elif name == b"event":
            self.event = value
        return 0

    def _dispatch(self) -> int:
        data, event = b"\n".join(self.data), self.event.decode(errors="replace")
        self.data, self.event = [], b""
        if self.ended or not data:
            return 0
        if data.strip() == b"[DONE]":
            self.ended = True
            return 0
        document = parse_json(data)
        kind = event or (document.get("type") if isinstance(document, dict) else None)
        if self.end_event is not None and kind == self.end_event:
            self.ended = True
            return 0
        return field_payload(document, self.field, self.encoding, self.audio)
