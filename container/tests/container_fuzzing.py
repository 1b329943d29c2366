"""Hostile inputs for the container as Hypothesis strategies, and what every answer must satisfy.

Shared by test_container_fuzz.py (a few thousand examples in CI) and benchmarks/fuzz.py (10,000 and
more). A strategy draws a probe tagged with its class, for the counts: an HTTP request (JSON shapes,
types, Unicode with lone surrogates, huge numbers, deep nesting, sizes, headers, content types), raw
bytes on a socket (protocol garbage, broken chunked bodies, bad framing), or a WebSocket frame. Each
``check_*`` sends one probe and returns the outcome (``"200"``, ``"422 invalid_speed"``...) or
raises `Violation`: a 5xx, an error that is not the contract's JSON error shape, a dropped
connection for a well-formed request, a WebSocket session that did not go on.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection

VOICES = ("af_heart", "am_adam")
MAX_TEXT_CHARS = 5000
BODY_LIMIT = MAX_TEXT_CHARS * 12 + 64 * 1024  # tts_container.request.body_limit
RAW_READ_S = 0.25  # how long a raw probe waits for more bytes once the server went quiet


class Violation(AssertionError):
    """An answer that breaks the container's contract."""


@dataclass(frozen=True)
class HttpProbe:
    kind: str
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ((b"content-type", b"application/json"),)
    method: str = "POST"
    path: str = "/invocations"


@dataclass(frozen=True)
class RawProbe:
    kind: str
    data: bytes


@dataclass(frozen=True)
class WsProbe:
    kind: str
    frame: str | bytes


# --- JSON values -----------------------------------------------------------------------------

any_unicode = st.text(st.characters(exclude_categories=()), max_size=40)  # lone surrogates too
speech_text = st.text(st.characters(categories=("L", "N", "P", "Zs")), min_size=1, max_size=60)
big_ints = st.integers(min_value=-(10**400), max_value=10**400)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | big_ints
    | st.floats(allow_nan=True, allow_infinity=True)
    | any_unicode
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_unicode, inner, max_size=4),
    max_leaves=12,
)
fields = {
    "text": speech_text | any_unicode | json_values,
    "phonemes": st.text(alphabet="həlˈoʊ wɜːld", min_size=1, max_size=30) | json_values,
    "voice": st.sampled_from((*VOICES, "nobody", "")) | json_values,
    "speed": st.sampled_from((0.5, 1, 1.0, 2.0, 0.49, 2.01)) | st.floats() | big_ints | json_values,
    "format": st.sampled_from(("pcm", "wav", "ogg", "PCM")) | json_values,
    "request_id": st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=140)
    | json_values,
}
requests = st.fixed_dictionaries({}, optional=fields) | st.dictionaries(
    st.sampled_from((*fields, "extra")) | any_unicode, json_values, max_size=6
)


def _field_value(raw: bytes) -> bytes:
    """What a client can send as a header value: no controls, no surrounding blanks."""
    return bytes(c for c in raw if c >= 0x20 and c != 0x7F).strip(b" ")


def _dumps(value: Any) -> bytes:
    # ASCII escapes carry lone surrogates; NaN/Infinity come out as the non-JSON tokens on purpose
    return json.dumps(value).encode()


def _nested(depth: int, leaf: str) -> str:
    return "".join('{"a":[' for _ in range(depth)) + leaf + "".join("]}" for _ in range(depth))


deep_bodies = st.one_of(
    st.integers(1, 4000).map(lambda n: ("[" * n + "]" * n).encode()),
    st.integers(1, 3000).map(lambda n: _nested(n, '"x"').encode()),
    st.integers(1, 3000).map(lambda n: ('{"text": ' + "[" * n + "]" * n + "}").encode()),
    st.integers(1, 4000).map(lambda n: ("[" * n).encode()),  # never closed
)
json_syntax = st.text(alphabet='"\\[]{}:,.-+eE0123456789aunltr ', max_size=400)  # near-JSON
sized_bodies = st.integers(0, BODY_LIMIT + 20_000).map(
    lambda n: _dumps({"text": "a " * (n // 2), "voice": "af_heart"})
)
content_types = st.sampled_from(
    (
        b"application/json",
        b"application/json; charset=utf-8",
        b"APPLICATION/JSON",
        b"application/vnd.api+json",
        b"text/plain",
        b"application/x-www-form-urlencoded",
        b"multipart/form-data; boundary=x",
        b"",
        b";;;",
        b"application/json; charset=\xff",
    )
) | st.binary(max_size=40).map(lambda b: _field_value(b))
header_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789!#$%&'*+.^_`|~", min_size=1)
header_values = st.binary(max_size=200).map(lambda b: _field_value(b))
safe_header_names = header_names.filter(
    lambda n: (
        n.lower() not in ("content-length", "transfer-encoding", "host", "connection")
        and not n.lower().startswith(("upgrade", "expect", "te"))
    )
)
valid_body = _dumps({"text": "Hello there.", "voice": "af_heart"})


def _tagged(kind: str, strategy: st.SearchStrategy[bytes]) -> st.SearchStrategy[HttpProbe]:
    return strategy.map(lambda body: HttpProbe(kind, body))


http_probes = st.one_of(
    _tagged("json_fields", requests.map(_dumps)),
    _tagged("unicode_text", any_unicode.map(lambda t: _dumps({"text": t}))),
    _tagged("huge_number", big_ints.map(lambda n: _dumps({"text": "Hi.", "speed": n}))),
    _tagged("deep_json", deep_bodies),
    _tagged("size", sized_bodies),
    _tagged("not_json", st.binary(max_size=2000)),
    _tagged("json_syntax", json_syntax.map(str.encode)),
    _tagged("plain_text", st.text(max_size=300).map(str.encode)),
    _tagged("unterminated_string", speech_text.map(lambda t: ('{"text": "' + t * 3).encode())),
    st.builds(
        lambda ct, body: HttpProbe("content_type", body, ((b"content-type", ct),)),
        content_types,
        st.sampled_from((valid_body, b"{}", b"")),
    ),
    st.builds(
        lambda extra, body: HttpProbe(
            "headers",
            body,
            (
                (b"content-type", b"application/json"),
                *((name.encode(), value) for name, value in extra),
            ),
        ),
        st.lists(st.tuples(safe_header_names | st.just("x-request-id"), header_values), max_size=5),
        st.sampled_from((valid_body, b"{}")),
    ),
    st.builds(
        lambda method, path: HttpProbe("method_path", valid_body, method=method, path=path),
        st.sampled_from(("GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "POST")),
        st.sampled_from(("/invocations", "/ping", "/", "/invocations/", "/x?y=%ff", "/%00")),
    ),
)

# --- raw bytes on a socket ------------------------------------------------------------------

_HEAD = b"POST /invocations HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
raw_probes = st.one_of(
    st.binary(min_size=1, max_size=300).map(lambda b: RawProbe("garbage", b + b"\r\n\r\n")),
    st.binary(min_size=1, max_size=200).map(
        lambda b: RawProbe(
            "bad_chunked", _HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b + b"\r\n\r\n"
        )
    ),
    st.tuples(st.integers(0, 40), st.binary(max_size=60)).map(
        lambda t: RawProbe(
            "bad_chunked",
            _HEAD
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % t[0]
            + t[1]
            + b"\r\n0\r\n\r\n",
        )
    ),
    st.sampled_from((b"abc", b"-1", b"1, 2", b"0x10", b" ", b"99999999999999999999999")).map(
        lambda n: RawProbe("bad_content_length", _HEAD + b"Content-Length: " + n + b"\r\n\r\n{}")
    ),
    st.binary(min_size=1, max_size=100).map(
        lambda b: RawProbe("bad_header", _HEAD + b.replace(b"\r\n", b"") + b"\r\n\r\n")
    ),
    st.sampled_from((b"HTTP/0.9", b"HTTP/2.0", b"HTTP/1.1x", b"HTTP/1", b"http/1.1", b"")).map(
        lambda v: RawProbe("http_version", b"GET /ping " + v + b"\r\nHost: t\r\n\r\n")
    ),
    st.integers(17 * 1024, 64 * 1024).map(
        lambda n: RawProbe("huge_head", b"GET /ping HTTP/1.1\r\nX-Big: " + b"a" * n + b"\r\n\r\n")
    ),
)

# --- WebSocket frames -----------------------------------------------------------------------

ws_probes = st.one_of(
    requests.map(lambda r: WsProbe("ws_fields", json.dumps(r))),
    requests.map(lambda r: WsProbe("ws_binary_json", _dumps(r))),
    st.binary(max_size=500).map(lambda b: WsProbe("ws_binary", b)),
    st.text(max_size=200).map(lambda t: WsProbe("ws_text", t)),
    json_syntax.map(lambda t: WsProbe("ws_json_syntax", t)),
    deep_bodies.map(lambda b: WsProbe("ws_deep_json", b.decode())),
    st.integers(MAX_TEXT_CHARS, 900_000).map(
        lambda n: WsProbe("ws_huge", json.dumps({"text": "a" * n}))
    ),
    st.sampled_from(("pcm", "wav", None)).map(
        lambda f: WsProbe("ws_valid", json.dumps({"text": "Hi there.", "format": f}))
    ),
)

# --- the property ---------------------------------------------------------------------------


def _error_code(status: int, content_type: str, body: bytes) -> str:
    """The JSON error's code; `Violation` unless the contract's JSON error shape."""
    if not content_type.startswith("application/json"):
        raise Violation(f"{status} with content type {content_type!r}: {body[:200]!r}")
    try:
        payload = json.loads(body)
    except ValueError:
        raise Violation(f"{status} with a body that is not JSON: {body[:200]!r}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("error"), str):
        raise Violation(f"{status} without an error code: {payload!r}")
    if payload["error"] != "queue_saturated" and not isinstance(payload.get("detail"), str):
        raise Violation(f"{status} without a detail: {payload!r}")
    return str(payload["error"])


def check_http(client: httpx.Client, probe: HttpProbe) -> str:
    try:
        response = client.request(
            probe.method, probe.path, content=probe.body, headers=list(probe.headers)
        )
    except httpx.TransportError as exc:  # well-formed request: the server must answer
        raise Violation(f"no answer to a well-formed request: {exc!r}") from exc
    status = response.status_code
    if status >= 500:
        raise Violation(f"{status}: {response.content[:300]!r}")
    if status < 400 or probe.method == "HEAD":  # audio, a redirect; HEAD answers carry no body
        return str(status)
    code = _error_code(status, response.headers.get("content-type", ""), response.content)
    return f"{status} {code}"


def _read_all(sock: socket.socket) -> tuple[bytes, str]:
    data = b""
    sock.settimeout(RAW_READ_S)
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, "open"
        except ConnectionResetError:
            return data, "reset"
        if not chunk:
            return data, "closed"
        data += chunk


def _responses(data: bytes) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    """HTTP/1.1 responses in ``data`` (Content-Length framed; the rest of the stream otherwise)."""
    found = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            raise Violation(f"an incomplete response head: {data[:200]!r}")
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise Violation(f"not an HTTP response: {data[:200]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        length = headers.get(b"content-length")
        if length is None or not length.isdigit():
            body, data = rest, b""
        else:
            body, data = rest[: int(length)], rest[int(length) :]
        found.append((int(parts[1]), headers, body))
    return found


def check_raw(port: int, probe: RawProbe) -> str:
    """Answers to raw bytes: none (the request is incomplete), or 4xx JSON errors."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(probe.data)
        data, end = _read_all(sock)
    answers = _responses(data)
    if not answers:
        return f"no answer ({end})"
    outcomes = []
    for status, headers, body in answers:
        if status >= 500:
            raise Violation(f"{status} for {probe.data[:120]!r}: {body[:200]!r}")
        if status >= 400:
            code = _error_code(status, headers.get(b"content-type", b"").decode("latin-1"), body)
            outcomes.append(f"{status} {code}")
        else:
            outcomes.append(str(status))
    return ", ".join(outcomes)


def check_ws(ws: ClientConnection, probe: WsProbe, timeout_s: float = 10.0) -> str:
    """One frame: the replies are an error frame or a whole synthesis, and the session goes on."""
    ws.send(probe.frame)
    try:
        first = ws.recv(timeout=timeout_s)
    except TimeoutError:
        raise Violation(f"no reply within {timeout_s} s to {probe.frame[:120]!r}") from None
    if not isinstance(first, str):
        raise Violation(f"the first reply is binary: {first[:60]!r}")
    reply = json.loads(first)
    if reply.get("type") == "error":
        if not isinstance(reply.get("error"), str) or not isinstance(reply.get("detail"), str):
            raise Violation(f"an error frame without error and detail: {reply!r}")
        return f"error {reply['error']}"
    if reply.get("type") != "synthesis_start":
        raise Violation(f"unexpected first reply: {reply!r}")
    audio = 0
    while True:
        message = ws.recv(timeout=timeout_s)
        if isinstance(message, bytes):
            audio += len(message)
            continue
        end = json.loads(message)
        if end.get("type") != "synthesis_complete" or end.get("audio_bytes") != audio:
            raise Violation(f"synthesis ended with {end!r} after {audio} audio bytes")
        return "synthesis_complete"


def check_still_serving(client: httpx.Client) -> None:
    """A valid request and /ping still work."""
    json_type = {"content-type": "application/json"}
    response = client.post("/invocations", content=valid_body, headers=json_type)
    if response.status_code != 200 or not response.content:
        raise Violation(f"a valid request afterwards got {response.status_code}")
    if client.get("/ping").status_code != 200:
        raise Violation("/ping is no longer 200")
