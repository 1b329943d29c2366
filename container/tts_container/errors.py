"""The contract's JSON error shape (docs/container.md#refusals), ``{"error": CODE, "detail": TEXT,
...}``, rendered so it cannot fail.

Every refusal goes through here: the app's, the admission gate's and the server's own (HTTP
parser errors, rejected WebSocket handshakes). The body is ASCII JSON, so no client input echoed
in a detail (a lone surrogate, say) can make rendering raise; details are cut to a length a
person reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

DETAIL_MAX_CHARS = 300
JSON_TYPE = b"application/json"


def shorten(text: str, limit: int = DETAIL_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_body(code: str, detail: str, extra: Mapping[str, Any] | None = None) -> bytes:
    return json.dumps({"error": code, "detail": shorten(detail), **(extra or {})}).encode("ascii")


def error_headers(
    body: bytes, *, request_id: str | None = None, close: bool = False
) -> list[tuple[bytes, bytes]]:
    """Raw ASGI/h11 headers for ``body``; ``close`` ends the connection after it."""
    headers = [(b"content-type", JSON_TYPE), (b"content-length", str(len(body)).encode())]
    if request_id is not None:
        headers.append((b"x-request-id", request_id.encode("ascii")))
    if close:
        headers.append((b"connection", b"close"))
    return headers


class ErrorResponse(Response):
    """A Starlette response carrying one error."""

    media_type = "application/json"

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(error_body(code, detail, extra), status_code=status, headers=headers)
