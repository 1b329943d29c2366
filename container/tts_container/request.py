"""Synthesis requests and the errors a bad one gets: the same for HTTP and WebSocket.

An error is ``{"error": CODE, "detail": TEXT}`` with a 4xx status; `RequestError` carries both.
Nothing a client sends can make validation raise anything else: the size and the nesting depth
of the JSON are checked on the raw bytes before any object is built, integers too long to be
anything we accept are read as floats (no huge-int conversion), and text must encode as UTF-8
(JSON's ``\\udae9`` escapes can smuggle in lone surrogates).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

SPEED_MIN = 0.5
SPEED_MAX = 2.0
FORMATS = ("pcm", "wav")
REQUEST_ID_MAX_CHARS = 128
JSON_MAX_DEPTH = 32
INT_MAX_DIGITS = 18  # longer integer literals are read as floats (no int conversion to overflow)
VALUE_MAX_CHARS = 60  # of a client value quoted in a detail

AudioFormat = Literal["pcm", "wav"]
# Kokoro's language codes the container reads text in.
LANGUAGES = {"a": "American English", "j": "Japanese"}


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
    # Kokoro's language code: how the text is read ('a' American English, 'j' Japanese). The voice
    # never sets it (jm_kumo, a Japanese pack, is the English voice).
    lang_code: str = "a"
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


def body_limit(max_text_chars: int) -> int:
    """Largest request body in bytes: JSON escapes of every character, plus the other fields."""
    return max_text_chars * 12 + 64 * 1024


# Linear on any input (no backtracking): escapes go first, left to right as JSON reads them, then
# strings, which then hold no quote; a regex that matched strings with their escapes in one go
# backtracked exponentially on an unterminated string (found by benchmarks/fuzz.py).
_JSON_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_JSON_STRING = re.compile(rb'"[^"]*+"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """Whether the JSON text in ``body`` nests arrays and objects deeper than ``limit``.

    Counted on the bytes, strings left out, so a deep document never reaches the recursive parser.
    """
    depth = 0
    unquoted = _JSON_STRING.sub(b"", _JSON_ESCAPE.sub(b"", body))
    for bracket in unquoted.translate(None, _NOT_BRACKETS):
        depth += 1 if bracket in b"[{" else -1
        if depth > limit:
            return True
    return False


def _bounded_int(literal: str) -> int | float:
    return int(literal) if len(literal.lstrip("-")) <= INT_MAX_DIGITS else float(literal)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def decode_json(body: bytes | str, *, max_bytes: int) -> dict[str, Any]:
    """The JSON object in ``body``; `RequestError` 413 or 400 otherwise."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    if len(raw) > max_bytes:
        raise RequestError(
            413, "payload_too_large", f"the request is over {max_bytes} bytes (MAX_TEXT_CHARS)"
        )
    if json_depth_exceeds(raw, JSON_MAX_DEPTH):
        raise RequestError(
            400, "json_too_deep", f"the JSON nests deeper than {JSON_MAX_DEPTH} levels"
        )
    try:
        payload = json.loads(raw, parse_int=_bounded_int, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise RequestError(
            400,
            "invalid_json",
            f'expected a JSON object like {{"text": "Hello."}}, got {_kind(payload)}',
        )
    return payload


def _kind(value: object) -> str:
    """The JSON type of a decoded value, in words."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    for python_type, name in kinds.items():
        if isinstance(value, python_type):
            return name
    return "a number"


def _quote(value: object) -> str:
    """A client value for a detail: repr (escapes lone surrogates), cut short."""
    text = repr(value)
    return text if len(text) <= VALUE_MAX_CHARS else text[: VALUE_MAX_CHARS - 3] + "..."


def _lone_surrogate(value: str) -> int | None:
    """Index of the first character UTF-8 cannot encode (a lone surrogate), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def parse_request(
    payload: dict[str, Any],
    *,
    voices: Collection[str],
    default_voice: str,
    max_text_chars: int,
    fallback_request_id: str | None = None,
    formats: Collection[str] = FORMATS,
    unavailable_languages: Mapping[str, str] | None = None,
) -> SynthesisRequest:
    """Validate ``payload`` into a `SynthesisRequest`, or raise `RequestError` naming the field.

    ``unavailable_languages``: language codes the engine cannot read here, each with what to
    install (a request in one is refused, never read with another language's G2P).
    """
    request_id = _request_id(payload, fallback_request_id)
    try:
        key, value = _source(payload, max_text_chars)
        voice = _voice(payload, voices, default_voice)
        speed = _speed(payload)
        audio_format = _format(payload, formats)
        lang_code = _lang_code(payload, unavailable_languages or {}, reads_text=key == "text")
    except RequestError as refused:
        # Each field's check refuses without knowing the id; the answer still names it.
        refused.request_id = request_id
        raise
    return SynthesisRequest(
        request_id=request_id,
        text=value if key == "text" else None,
        phonemes=value if key == "phonemes" else None,
        voice=voice,
        speed=speed,
        format=audio_format,
        lang_code=lang_code,
    )


def _request_id(payload: dict[str, Any], fallback: str | None) -> str:
    """The client's request_id, else the transport's (a header), else a new one."""
    raw_id = payload.get("request_id")
    if raw_id is not None and not is_valid_request_id(raw_id):
        raise RequestError(
            422,
            "invalid_request_id",
            f"request_id must be 1 to {REQUEST_ID_MAX_CHARS} printable ASCII characters "
            "without spaces",
        )
    if raw_id is not None:
        return str(raw_id)
    if is_valid_request_id(fallback):
        return str(fallback)
    return new_request_id()


def _source(payload: dict[str, Any], max_text_chars: int) -> tuple[str, str]:
    """Which of text and phonemes the request carries (exactly one), and its value."""
    has_text = "text" in payload and payload["text"] is not None
    has_phonemes = "phonemes" in payload and payload["phonemes"] is not None
    if has_text and has_phonemes:
        raise RequestError(422, "invalid_text", "give either text or phonemes, not both")
    if not has_text and not has_phonemes:
        raise RequestError(400, "invalid_text", "the request needs a non-empty string field 'text'")
    key = "text" if has_text else "phonemes"
    value = payload[key]
    if not isinstance(value, str):
        raise RequestError(422, "invalid_text", f"'{key}' must be a string, got {_kind(value)}")
    bad_at = _lone_surrogate(value)
    if bad_at is not None:
        raise RequestError(
            400,
            "invalid_text",
            f"'{key}' is not valid Unicode: a lone surrogate U+{ord(value[bad_at]):04X} "
            f"at character {bad_at}",
        )
    if not value.strip():
        raise RequestError(422, "invalid_text", f"'{key}' is empty")
    if len(value) > max_text_chars:
        raise RequestError(
            413,
            "text_too_long",
            f"'{key}' has {len(value)} characters; the limit is {max_text_chars} (MAX_TEXT_CHARS)",
        )
    return key, value


def _voice(payload: dict[str, Any], voices: Collection[str], default_voice: str) -> str:
    voice = payload.get("voice")
    if voice is None:
        voice = default_voice if default_voice in voices else next(iter(voices))
    if not isinstance(voice, str) or voice not in voices:
        raise RequestError(
            400,
            "unknown_voice",
            f"unknown voice {_quote(voice)}; available voices: {', '.join(sorted(voices))}",
        )
    return voice


def _speed(payload: dict[str, Any]) -> float:
    speed = payload.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    # the comparison is exact for ints of any size and false for NaN: nothing is converted first
    if (
        isinstance(speed, bool)
        or not isinstance(speed, int | float)
        or not SPEED_MIN <= speed <= SPEED_MAX
    ):
        raise RequestError(
            422,
            "invalid_speed",
            f"speed must be a number in [{SPEED_MIN}, {SPEED_MAX}], got {_quote(speed)}",
        )
    return float(speed)


def _format(payload: dict[str, Any], formats: Collection[str]) -> AudioFormat:
    audio_format = payload.get("format", "pcm")
    if audio_format is None:
        audio_format = "pcm"
    if audio_format not in formats:
        raise RequestError(
            422,
            "invalid_format",
            f"format must be one of {', '.join(formats)}, got {_quote(audio_format)}",
        )
    return audio_format


def _lang_code(
    payload: dict[str, Any], unavailable_languages: Mapping[str, str], *, reads_text: bool
) -> str:
    """A language the container knows; for text, one whose frontend this server has."""
    lang_code = payload.get("lang_code", "a")
    if lang_code is None:
        lang_code = "a"
    if not isinstance(lang_code, str) or lang_code not in LANGUAGES:
        known = ", ".join(f"'{code}' ({name})" for code, name in LANGUAGES.items())
        raise RequestError(
            422, "invalid_lang_code", f"lang_code must be one of {known}, got {_quote(lang_code)}"
        )
    missing = unavailable_languages.get(lang_code)
    if missing is not None and reads_text:
        raise RequestError(
            422,
            "language_unavailable",
            f"lang_code '{lang_code}' ({LANGUAGES[lang_code]}) needs a frontend this server "
            f"lacks: {missing}",
        )
    return lang_code
