"""Synthesis requests and the errors a bad one gets: the same for HTTP and WebSocket.

An error is ``{"error": CODE, "detail": TEXT}`` with a 4xx status; `RequestError` carries both.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

SPEED_MIN = 0.5
SPEED_MAX = 2.0
FORMATS = ("pcm", "wav")
REQUEST_ID_MAX_CHARS = 128

AudioFormat = Literal["pcm", "wav"]


class RequestError(Exception):
    """A request the server refuses: HTTP status, error code and a detail for people."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        request_id: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.request_id = request_id
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "detail": self.detail, **self.extra}


@dataclass(frozen=True)
class SynthesisRequest:
    """One validated request: exactly one of ``text`` and ``phonemes`` is set."""

    request_id: str
    text: str | None = None
    phonemes: str | None = None
    voice: str = "af_heart"
    speed: float = 1.0
    format: AudioFormat = "pcm"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def source(self) -> str:
        """The text, or the phonemes when the request carries phonemes."""
        return self.phonemes if self.phonemes is not None else (self.text or "")


def new_request_id() -> str:
    return str(uuid.uuid4())


def is_valid_request_id(value: object) -> bool:
    """Printable ASCII without spaces, 1 to 128 characters (it is echoed in a header)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= REQUEST_ID_MAX_CHARS
        and all(0x21 <= ord(ch) <= 0x7E for ch in value)
    )


def is_json_content_type(content_type: str | None) -> bool:
    """JSON, or no content type at all (curl without ``-H``)."""
    if not content_type:
        return True
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def decode_json(body: bytes | str) -> dict[str, Any]:
    """The JSON object in ``body``; `RequestError` 400 invalid_json otherwise."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise RequestError(
            400,
            "invalid_json",
            f'expected a JSON object like {{"text": "Hello."}}, got {type(payload).__name__}',
        )
    return payload


def parse_request(
    payload: dict[str, Any],
    *,
    voices: Collection[str],
    default_voice: str,
    max_text_chars: int,
    fallback_request_id: str | None = None,
    formats: Collection[str] = FORMATS,
) -> SynthesisRequest:
    """Validate ``payload`` into a `SynthesisRequest`, or raise `RequestError` naming the field."""
    raw_id = payload.get("request_id")
    if raw_id is not None and not is_valid_request_id(raw_id):
        raise RequestError(
            422,
            "invalid_request_id",
            f"request_id must be 1 to {REQUEST_ID_MAX_CHARS} printable ASCII characters "
            "without spaces",
        )
    if raw_id is not None:
        request_id = str(raw_id)
    elif is_valid_request_id(fallback_request_id):
        request_id = str(fallback_request_id)
    else:
        request_id = new_request_id()

    def fail(status: int, code: str, detail: str) -> RequestError:
        return RequestError(status, code, detail, request_id=request_id)

    has_text = "text" in payload and payload["text"] is not None
    has_phonemes = "phonemes" in payload and payload["phonemes"] is not None
    if has_text and has_phonemes:
        raise fail(422, "invalid_text", "give either text or phonemes, not both")
    if not has_text and not has_phonemes:
        raise fail(400, "invalid_text", "the request needs a non-empty string field 'text'")
    key = "text" if has_text else "phonemes"
    value = payload[key]
    if not isinstance(value, str):
        raise fail(422, "invalid_text", f"'{key}' must be a string, got {type(value).__name__}")
    if not value.strip():
        raise fail(422, "invalid_text", f"'{key}' is empty")
    if len(value) > max_text_chars:
        raise fail(
            413,
            "text_too_long",
            f"'{key}' has {len(value)} characters; the limit is {max_text_chars} (MAX_TEXT_CHARS)",
        )

    voice = payload.get("voice")
    if voice is None:
        voice = default_voice if default_voice in voices else next(iter(voices))
    if not isinstance(voice, str) or voice not in voices:
        raise fail(
            400,
            "unknown_voice",
            f"unknown voice {voice!r}; available voices: {', '.join(sorted(voices))}",
        )

    speed = payload.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if (
        isinstance(speed, bool)
        or not isinstance(speed, int | float)
        or not math.isfinite(speed)
        or not SPEED_MIN <= speed <= SPEED_MAX
    ):
        raise fail(
            422,
            "invalid_speed",
            f"speed must be a number in [{SPEED_MIN}, {SPEED_MAX}], got {speed!r}",
        )

    audio_format = payload.get("format", "pcm")
    if audio_format is None:
        audio_format = "pcm"
    if audio_format not in formats:
        raise fail(
            422,
            "invalid_format",
            f"format must be one of {', '.join(formats)}, got {audio_format!r}",
        )

    return SynthesisRequest(
        request_id=request_id,
        text=value if key == "text" else None,
        phonemes=value if key == "phonemes" else None,
        voice=voice,
        speed=float(speed),
        format=audio_format,
    )
