"""A fake engine with controllable timing, and a raw ASGI driver for in-process streaming tests.

(Named uniquely: this directory is on sys.path next to the project's other test directories.)
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message
from tts_container.request import SynthesisRequest
from tts_container.state import AppState

SAMPLE_VALUE = 0.25
WAIT_S = 10.0


class FakeEngine:
    """Yields ``segments`` chunks of ``samples`` samples each, ``delay_s`` apart.

    ``hold`` (when given) blocks every segment of non-warm-up requests until it is set;
    ``fail_at`` raises instead of yielding that segment. Records what happened per request id.
    """

    sample_rate = 24000

    def __init__(
        self,
        voices: Sequence[str] = ("af_heart", "am_adam"),
        *,
        segments: int = 3,
        samples: int = 2400,
        delay_s: float = 0.0,
        fail_at: int | None = None,
        hold: threading.Event | None = None,
        unavailable_languages: Mapping[str, str] | None = None,
    ) -> None:
        self._voices = tuple(voices)
        self._unavailable_languages = dict(unavailable_languages or {})
        self.segments = segments
        self.samples = samples
        self.delay_s = delay_s
        self.fail_at = fail_at
        self.hold = hold
        self.started: list[str] = []
        self.produced: dict[str, int] = {}
        self.closed: dict[str, threading.Event] = {}
        self.requests: list[SynthesisRequest] = []
        self.batches: list[int] = []

    @property
    def voices(self) -> Sequence[str]:
        return self._voices

    @property
    def unavailable_languages(self) -> Mapping[str, str]:
        return self._unavailable_languages

    def pieces(self, request: SynthesisRequest) -> Iterator[tuple[str, int]]:
        """``segments`` pieces; ``closed`` is set when the scheduler is done with the request."""
        request_id = request.request_id
        self.requests.append(request)
        self.started.append(request_id)
        self.produced[request_id] = 0
        closed = self.closed.setdefault(request_id, threading.Event())
        try:
            for index in range(self.segments):
                yield (request_id, index)
        finally:
            closed.set()

    def synthesize(self, batch: Sequence[tuple[str, int]]) -> list[np.ndarray]:
        self.batches.append(len(batch))
        out = []
        for request_id, index in batch:
            if self.hold is not None and request_id != "warmup":
                assert self.hold.wait(WAIT_S), "the test never released the fake engine"
            if self.delay_s:
                time.sleep(self.delay_s)
            if index == self.fail_at and request_id != "warmup":
                raise RuntimeError("the fake engine failed on purpose")
            self.produced[request_id] += 1
            out.append(np.full(self.samples, SAMPLE_VALUE, dtype=np.float32))
        return out

    def wait_closed(self, request_id: str, timeout: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while request_id not in self.closed:
            assert time.monotonic() < deadline, f"synthesis of {request_id} never started"
            time.sleep(0.01)
        assert self.closed[request_id].wait(timeout), f"synthesis of {request_id} never ended"


async def until(condition: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    """Wait (bounded) for a condition instead of sleeping for the time it usually takes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened within {timeout_s:g} s"
        await asyncio.sleep(0.005)


# conftest's `make_app(engine=None, **settings)` -> (app, engine, metrics lines).
AppFactory = Callable[..., tuple[Starlette, FakeEngine, io.StringIO]]


async def eventually(condition: Callable[[], bool]) -> None:
    """Wait (at most `WAIT_S`) until ``condition()`` holds."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(
    app: ASGIApp, ready: bool = True, timeout_s: float = WAIT_S
) -> AsyncIterator[AppState]:
    """Run the app's lifespan; wait until the model is ready unless ``ready`` is False."""
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await asyncio.wait_for(outbox.get(), WAIT_S)
    assert started["type"] == "lifespan.startup.complete", started
    state: AppState = app.state.tts  # type: ignore[attr-defined]
    if ready:
        assert await asyncio.to_thread(state.ready_event.wait, timeout_s), state.load_error
    try:
        yield state
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(outbox.get(), WAIT_S)
        await asyncio.wait_for(task, WAIT_S)


@dataclass
class HttpResult:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)
    complete: bool = False
    error: BaseException | None = None
    started_at: float = 0.0

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def json(self) -> Any:
        return json.loads(self.body)


async def post(
    app: ASGIApp,
    payload: Any,
    *,
    path: str = "/invocations",
    headers: dict[str, str] | None = None,
    disconnect_after_chunks: int | None = None,
    disconnect_at_once: bool = False,
    spec_version: str = "2.3",
    timeout_s: float = WAIT_S,
) -> HttpResult:
    """POST ``payload`` (bytes, or JSON-encoded) straight to the ASGI app, streaming like uvicorn.

    With ``disconnect_after_chunks`` the client leaves once that many non-empty body chunks came;
    with ``disconnect_at_once`` right after sending the body. ASGI spec 2.3 (uvicorn's h11) tells
    the app through ``receive``; 2.4 also makes later sends raise OSError.
    """
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    all_headers = {"content-type": "application/json", **(headers or {})}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in all_headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }
    result = HttpResult(started_at=time.perf_counter())
    gone = asyncio.Event()
    if disconnect_at_once:
        gone.set()
    body_sent = False

    async def receive() -> Message:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if gone.is_set() and spec_version >= "2.4":
            raise OSError("the client went away")
        if message["type"] == "http.response.start":
            result.status = message["status"]
            result.headers = {k.decode().lower(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            if message.get("body"):
                result.chunks.append(message["body"])
                result.chunk_times.append(time.perf_counter())
                if (
                    disconnect_after_chunks is not None
                    and len(result.chunks) >= disconnect_after_chunks
                ):
                    gone.set()
            if not message.get("more_body", False):
                result.complete = True

    try:
        await asyncio.wait_for(app(scope, receive, send), timeout_s)
    except (TimeoutError, AssertionError):
        raise
    except Exception as exc:  # an aborted stream: what uvicorn would log and cut
        result.error = exc
    return result
