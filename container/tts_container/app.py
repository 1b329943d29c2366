"""The Starlette app: ``GET /ping``, ``POST /invocations`` and the bidirectional WebSocket stream.

The model loads in the lifespan, on a background thread, so the server answers ``/ping`` (503)
while it loads; ``/ping`` turns 200 once the weights are loaded and a warm-up synthesis ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from tts_container.audio import (
    WAV_CONTENT_TYPE,
    audio_seconds,
    pcm_content_type,
    to_pcm16,
    wav_header,
)
from tts_container.concurrency import (
    InferenceExecutor,
    SynthesisCancelled,
    SynthesisFailed,
    SynthesisJob,
)
from tts_container.engine import Engine, Samples, inference_workers, synthesize_all
from tts_container.errors import ErrorResponse
from tts_container.gate import AdmissionGate, InFlight
from tts_container.markers import emit_marker
from tts_container.metrics import MetricsLog, RequestMetrics
from tts_container.request import (
    RequestError,
    SynthesisRequest,
    body_limit,
    decode_json,
    is_json_content_type,
    is_valid_request_id,
    new_request_id,
    parse_request,
)
from tts_container.scheduler import Policy
from tts_container.settings import Settings
from tts_container.state import AppState, EngineFactory
from tts_container.websocket import WEBSOCKET_PATH, websocket_session

log = logging.getLogger(__name__)

WARMUP_TEXT = "Warm up, once."


def kokoro_engine_factory(settings: Settings) -> Engine:
    """Kokoro on the engine ``ENGINE`` resolves to (torch, or ONNX Runtime on a CPU)."""
    from tts_container.engine import KokoroEngine
    from tts_container.onnx_engine import OnnxKokoroEngine

    def on_framework_init() -> None:
        emit_marker("framework_init")

    kind = OnnxKokoroEngine if settings.kokoro_engine == "onnx" else KokoroEngine
    return kind.load(settings, on_framework_init=on_framework_init)


def default_engine_factory(settings: Settings) -> EngineFactory:
    """Kokoro, or the synthetic engine when ``ENGINE=synthetic``."""
    if settings.engine == "synthetic":
        from tts_container.synthetic import synthetic_engine_factory

        return synthetic_engine_factory
    return kokoro_engine_factory


def warm_up(engine: Engine, settings: Settings) -> None:
    """One synthesis, on the thread that will serve requests (torch keeps per-thread state)."""
    voices = engine.voices
    voice = settings.default_voice if settings.default_voice in voices else next(iter(voices))
    request = SynthesisRequest(request_id="warmup", text=WARMUP_TEXT, voice=voice)
    for _ in synthesize_all(engine, request):
        pass


def load_engine(state: AppState) -> None:
    """Build the engine, warm it up and mark the app ready (loader thread)."""
    state.phase = "loading"
    try:
        engine = state.engine_factory(state.settings)
        emit_marker("weights_ready")
        assert state.executor is not None, "the lifespan starts the executor first"
        state.executor.run_on_every_worker(lambda: warm_up(engine, state.settings))
        emit_marker("warmup_done")
        state.engine = engine
        state.phase = "ready"
        state.ready_event.set()
        log.info("ready: model loaded and warmed up")
    except Exception as exc:
        if state.stopping:
            log.info("loading abandoned: the server is shutting down")
            state.phase = "stopped"
            return
        log.exception("loading the model failed")
        state.load_error = f"{type(exc).__name__}: {exc}"
        state.phase = "failed"
    finally:
        state.settled_event.set()


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.tts
    return state


async def ping(request: Request) -> Response:
    """200 once ready; the gate's own counts ride along in headers (soak tests read them)."""
    state = _state(request)
    in_flight = state.in_flight
    headers = {
        "X-In-Flight": str(in_flight.depth),
        "X-In-Flight-Peak": str(in_flight.peak),
        "X-Max-Queue-Depth": str(in_flight.max_depth),
        **{f"X-TTS-{name.title()}": value for name, value in state.settings.labels.items()},
    }
    forced = getattr(state.engine, "forced", None)  # FORCE_DURATIONS: forced and missed counts
    if forced is not None:
        headers.update(forced.headers())
    if state.drain.draining:
        return JSONResponse({"status": "stopping"}, status_code=503, headers=headers)
    if state.ready:
        return JSONResponse({"status": "ready"}, headers=headers)
    body: dict[str, Any] = {"status": state.phase}
    if state.load_error:
        body["detail"] = state.load_error
    return JSONResponse(body, status_code=503, headers=headers)


def _error_response(err: RequestError, request_id: str) -> Response:
    return ErrorResponse(
        err.status, err.code, err.detail, err.extra, headers={"X-Request-Id": request_id}
    )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    too_large = RequestError(
        413, "payload_too_large", f"the request is over {limit} bytes (MAX_TEXT_CHARS)"
    )
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


class ClientGone(Exception):
    """The client disconnected before its audio started."""


class StreamCut(Exception):
    """The synthesis of a stream already under way was cancelled (the drain's deadline)."""


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def first_chunk_or_disconnect(job: SynthesisJob, receive: Receive) -> Samples | None:
    """The job's first chunk (None: no audio at all); `ClientGone` if the client leaves first."""
    chunk_task = asyncio.ensure_future(job.next_chunk())
    watch_task = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        done, _ = await asyncio.wait({chunk_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch_task.cancel()
        if not chunk_task.done():
            chunk_task.cancel()
    if chunk_task in done:
        return chunk_task.result()
    raise ClientGone


class AudioStreamResponse(StreamingResponse):
    """Chunked audio: the WAV header if asked for, then PCM as each segment is ready.

    Whatever ends the response (last chunk, engine error, client gone, a cut), ``on_close`` runs
    once and the job is cancelled if it was still going. A cut stream returns without its last
    chunk, so the server closes the connection and the client sees a truncated body, not a short
    complete one.
    """

    def __init__(
        self,
        job: SynthesisJob,
        first: Samples | None,
        *,
        sample_rate: int,
        on_close: Callable[[AudioStreamResponse], None],
    ) -> None:
        self.job = job
        self.pcm_bytes = 0
        self.outcome = "disconnected"
        self._on_close = on_close
        request = job.request
        wav = request.format == "wav"
        super().__init__(
            self._body(first, wav, sample_rate),
            media_type=WAV_CONTENT_TYPE if wav else pcm_content_type(sample_rate),
            headers={"X-Request-Id": request.request_id},
        )

    async def _body(
        self, first: Samples | None, wav: bool, sample_rate: int
    ) -> AsyncIterator[bytes]:
        if wav:
            yield wav_header(sample_rate)
        chunk = first
        try:
            while chunk is not None:
                pcm = to_pcm16(chunk)
                self.pcm_bytes += len(pcm)
                yield pcm
                chunk = await self.job.next_chunk()
        except SynthesisFailed:
            self.outcome = "failed"
            raise
        except SynthesisCancelled:
            self.outcome = "cancelled"
            raise StreamCut from None
        self.outcome = "ok"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except StreamCut:
            log.info("request %s cut: the server is shutting down", self.job.request.request_id)
        finally:
            if self.outcome != "ok":
                self.job.cancel()
            self._on_close(self)


async def invocations(request: Request) -> Response:
    state = _state(request)
    received = time.perf_counter()
    header_id = request.headers.get("x-request-id")
    fallback_id = header_id if is_valid_request_id(header_id) else None

    def record(request_id: str, status: str, **values: Any) -> None:
        latency = time.perf_counter() - received
        state.metrics.record(
            RequestMetrics(request_id, "http", status, latency_s=latency, **values)
        )

    engine = state.engine
    try:
        if engine is None or state.executor is None:
            raise RequestError(503, "not_ready", f"the model is {state.phase}; poll GET /ping")
        content_type = request.headers.get("content-type")
        if not is_json_content_type(content_type):
            raise RequestError(
                415,
                "unsupported_media_type",
                f"send the request as Content-Type: application/json (got {content_type!r})",
            )
        limit = body_limit(state.settings.max_text_chars)
        payload = decode_json(await _read_body(request, limit), max_bytes=limit)
        synthesis = parse_request(
            payload,
            voices=engine.voices,
            unavailable_languages=engine.unavailable_languages,
            default_voice=state.settings.default_voice,
            max_text_chars=state.settings.max_text_chars,
            fallback_request_id=fallback_id,
        )
    except RequestError as err:
        request_id = err.request_id or fallback_id or new_request_id()
        status = "not_ready" if err.code == "not_ready" else "invalid"
        record(request_id, status, error=err.code)
        return _error_response(err, request_id)
    except ClientDisconnect:
        record(fallback_id or new_request_id(), "disconnected")
        return Response(status_code=400)

    job = state.executor.submit(engine, synthesis)
    request_id = synthesis.request_id
    unregister_cut = state.drain.register(job.cancel)

    def job_values() -> dict[str, Any]:
        return job.metric_values()

    def on_close(response: AudioStreamResponse) -> None:
        unregister_cut()
        record(
            request_id,
            response.outcome,
            audio_s=audio_seconds(response.pcm_bytes, engine.sample_rate),
            error="synthesis_failed" if response.outcome == "failed" else None,
            **job_values(),
        )

    streaming = False
    try:
        first = await first_chunk_or_disconnect(job, request.receive)
    except ClientGone:
        job.cancel()
        record(request_id, "disconnected", **job_values())
        return Response(status_code=400)
    except SynthesisFailed as exc:
        record(request_id, "failed", error="synthesis_failed", **job_values())
        failure = RequestError(500, "synthesis_failed", str(exc))
        return _error_response(failure, request_id)
    except SynthesisCancelled:
        record(request_id, "cancelled", **job_values())
        stopping = RequestError(
            503, "shutting_down", "the server is shutting down; retry elsewhere"
        )
        return _error_response(stopping, request_id)
    except asyncio.CancelledError:  # the server is stopping: nobody will read this audio
        job.cancel()
        raise
    else:
        streaming = True
        return AudioStreamResponse(job, first, sample_rate=engine.sample_rate, on_close=on_close)
    finally:
        if not streaming:
            unregister_cut()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    code = codes.get(exc.status_code, "http_error")
    return ErrorResponse(exc.status_code, code, str(exc.detail), headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    """A bug: still the JSON error shape (Starlette logs the exception and re-raises it)."""
    return ErrorResponse(500, "internal_error", f"{type(exc).__name__} in the server; see its log")


def create_app(
    settings: Settings | None = None,
    engine_factory: EngineFactory | None = None,
    *,
    metrics: MetricsLog | None = None,
) -> Starlette:
    """The server app; ``engine_factory`` defaults to the Kokoro engine (tests pass a fake)."""
    settings = Settings.from_env() if settings is None else settings
    in_flight = InFlight(settings.queue_max_depth)
    state = AppState(
        settings=settings,
        in_flight=in_flight,
        metrics=metrics or MetricsLog(settings.model_name, labels=settings.labels),
        engine_factory=engine_factory or default_engine_factory(settings),
    )

    def on_reject(request_id: str, elapsed_s: float) -> None:
        state.metrics.record(
            RequestMetrics(
                request_id, "http", "rejected", latency_s=elapsed_s, error="queue_saturated"
            )
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        policy = Policy.from_settings(settings)
        workers = inference_workers(settings)
        log.info(
            "inference workers: %d%s",
            workers,
            " (auto: one per CPU core on a CPU, one on a GPU)"
            if settings.inference_workers is None
            else "",
        )
        state.executor = InferenceExecutor(
            workers, policy, garble_batches=settings.fault_garble_batches
        )
        if settings.fault_garble_batches:
            log.warning("FAULT_GARBLE_BATCHES is set: batched audio is garbled on purpose")
        state.loader = threading.Thread(
            target=load_engine, args=(state,), name="tts-loader", daemon=True
        )
        state.loader.start()
        try:
            yield
        finally:
            state.stopping = True
            state.executor.shutdown()

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: _http_error,
        Exception: _internal_error,
    }
    app = Starlette(
        routes=[
            Route("/ping", ping, methods=["GET"]),
            Route("/invocations", invocations, methods=["POST"]),
            WebSocketRoute(WEBSOCKET_PATH, websocket_session),
        ],
        middleware=[Middleware(AdmissionGate, in_flight=in_flight, on_reject=on_reject)],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    app.state.tts = state
    return app
