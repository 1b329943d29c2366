"""``WS /invocations-bidirectional-stream``: one session, many synthesis requests, one at a time.

Each text or binary frame holds a JSON request like the body of ``POST /invocations``. Per request
the server sends ``{"type": "synthesis_start", "request_id": ...}``, binary frames of PCM (s16le,
mono, the engine's rate), then ``{"type": "synthesis_complete", "request_id": ..., "audio_bytes": N,
"audio_s": ...}``. A bad request, or one over the admission bound, gets
``{"type": "error", "request_id": ..., "error": CODE, "detail": ...}`` and the session goes on.
Frames are read while a request is synthesized, so a client that leaves stops its synthesis at the
next segment; later requests wait their turn, at most `INBOX_MAX_MESSAGES` of them: one more is
answered at once with the error ``too_many_pending`` (and dropped), so a client that floods frames
costs bounded memory and is still seen leaving at once. Pings are answered by the server
(uvicorn). A synthesis cut by the shutdown drain gets an error frame ``shutting_down`` and the
session closes with 1012 (service restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

try:
    from starlette.websockets import WebSocketDisconnected
except ImportError:  # older Starlette raises a plain RuntimeError
    WebSocketDisconnected = RuntimeError  # type: ignore[misc,assignment]

from tts_container.audio import audio_seconds, to_pcm16
from tts_container.concurrency import SynthesisCancelled, SynthesisFailed, SynthesisJob
from tts_container.errors import shorten
from tts_container.gate import SHUTTING_DOWN
from tts_container.metrics import RequestMetrics
from tts_container.request import (
    RequestError,
    SynthesisRequest,
    body_limit,
    decode_json,
    is_valid_request_id,
    parse_request,
)
from tts_container.state import AppState

WEBSOCKET_PATH = "/invocations-bidirectional-stream"
TRANSPORT = "websocket"
SERVICE_RESTART = 1012
INBOX_MAX_MESSAGES = 16
TOO_MANY_PENDING = "too_many_pending"
# What sending to a client that has gone raises.
CLIENT_GONE = (WebSocketDisconnect, WebSocketDisconnected)


class _Session:
    def __init__(self, websocket: WebSocket, state: AppState) -> None:
        self.websocket = websocket
        self.state = state
        self.job: SynthesisJob | None = None
        self.client_gone = False
        self.cut = False

    async def run(self) -> None:
        inbox: asyncio.Queue[Message | None] = asyncio.Queue()  # bounded by _read
        reader = asyncio.create_task(self._read(inbox))
        try:
            while (message := await inbox.get()) is not None:
                if not await self._handle(message):
                    break
        finally:
            reader.cancel()
            if self.job is not None:
                self.job.cancel()

    async def _read(self, inbox: asyncio.Queue[Message | None]) -> None:
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self.client_gone = True
                    if self.job is not None:
                        self.job.cancel()
                    return
                if inbox.qsize() < INBOX_MAX_MESSAGES:
                    inbox.put_nowait(message)
                else:
                    await self._refuse_pending(message)
        finally:
            inbox.put_nowait(None)

    async def _refuse_pending(self, message: Message) -> None:
        """A request beyond the inbox's bound: an error frame now, nothing kept."""
        received = time.perf_counter()
        request_id = None
        with contextlib.suppress(RequestError):
            payload = decode_json(
                message.get("text") or message.get("bytes") or b"",
                max_bytes=body_limit(self.state.settings.max_text_chars),
            )
            if is_valid_request_id(payload.get("request_id")):
                request_id = str(payload["request_id"])
        self._record(request_id, "rejected", received, error=TOO_MANY_PENDING)
        detail = (
            f"{INBOX_MAX_MESSAGES} requests of this session already wait; send more as they "
            "complete"
        )
        await self._send_error(request_id, TOO_MANY_PENDING, detail)

    async def _send_json(self, frame: dict[str, Any]) -> None:
        await self.websocket.send_text(json.dumps(frame))

    def _record(self, request_id: str | None, status: str, received: float, **values: Any) -> None:
        self.state.metrics.record(
            RequestMetrics(
                request_id or "",
                TRANSPORT,
                status,
                latency_s=time.perf_counter() - received,
                **values,
            )
        )

    async def _handle(self, message: Message) -> bool:
        """Serve one request; False once the client is gone."""
        received = time.perf_counter()
        try:
            request = self._parse(message)
        except RequestError as err:
            status = "not_ready" if err.code == "not_ready" else "invalid"
            self._record(err.request_id, status, received, error=err.code)
            return await self._send_error(err.request_id, err.code, err.detail, err.extra)

        in_flight = self.state.in_flight
        if not in_flight.try_acquire():
            code, detail, extra = in_flight.refusal()
            self._record(request.request_id, "rejected", received, error=code)
            return await self._send_error(request.request_id, code, detail, extra)
        try:
            return await self._synthesize(request, received)
        finally:
            in_flight.release()

    def _parse(self, message: Message) -> SynthesisRequest:
        raw = message.get("text")
        if raw is None:
            raw = message.get("bytes") or b""
        payload = decode_json(raw, max_bytes=body_limit(self.state.settings.max_text_chars))
        engine = self.state.engine
        if engine is None:
            raise RequestError(503, "not_ready", f"the model is {self.state.phase}; retry later")
        try:
            return parse_request(
                payload,
                voices=engine.voices,
                unavailable_languages=engine.unavailable_languages,
                default_voice=self.state.settings.default_voice,
                max_text_chars=self.state.settings.max_text_chars,
                formats=("pcm",),
            )
        except RequestError as err:
            if err.code == "invalid_format":
                err.detail += " (the WebSocket stream carries raw PCM only)"
            raise

    async def _send_error(
        self, request_id: str | None, code: str, detail: str, extra: dict[str, Any] | None = None
    ) -> bool:
        frame = {"type": "error", "request_id": request_id, "error": code}
        frame["detail"] = shorten(detail)
        try:
            await self._send_json({**frame, **(extra or {})})
        except CLIENT_GONE:
            return False
        return not self.client_gone

    async def _synthesize(self, request: SynthesisRequest, received: float) -> bool:
        engine = self.state.engine
        executor = self.state.executor
        assert engine is not None
        assert executor is not None
        request_id = request.request_id
        pcm_bytes = 0
        job: SynthesisJob | None = None
        # whatever ends this request (a cancelled task included), one metrics line is written
        status, error = "disconnected", None
        try:
            await self._send_json({"type": "synthesis_start", "request_id": request_id})
            job = self.job = executor.submit(engine, request)
            unregister_cut = self.state.drain.register(self._cut)
            try:
                async for chunk in job.chunks():
                    pcm = to_pcm16(chunk)
                    await self.websocket.send_bytes(pcm)
                    pcm_bytes += len(pcm)
            except SynthesisFailed as exc:
                status, error = "failed", "synthesis_failed"
                return await self._send_error(request_id, "synthesis_failed", str(exc))
            except SynthesisCancelled:
                if self.cut and not self.client_gone:
                    status, error = "cancelled", SHUTTING_DOWN
                    detail = "the server is shutting down; the synthesis was cut"
                    await self._send_error(request_id, SHUTTING_DOWN, detail)
                return False
            finally:
                unregister_cut()
            audio_s = audio_seconds(pcm_bytes, engine.sample_rate)
            await self._send_json(
                {
                    "type": "synthesis_complete",
                    "request_id": request_id,
                    "audio_bytes": pcm_bytes,
                    "audio_s": round(audio_s, 6),
                }
            )
            status = "ok"
            return True
        except CLIENT_GONE:
            return False
        finally:
            values: dict[str, Any] = {"audio_s": audio_seconds(pcm_bytes, engine.sample_rate)}
            if job is not None:
                job.cancel()
                values.update(job.metric_values())
            self.job = None
            self._record(request_id, status, received, error=error, **values)

    def _cut(self) -> None:
        self.cut = True
        if self.job is not None:
            self.job.cancel()


async def websocket_session(websocket: WebSocket) -> None:
    state: AppState = websocket.app.state.tts
    await websocket.accept()
    session = _Session(websocket, state)
    await session.run()
    if session.cut and not session.client_gone:
        with contextlib.suppress(*CLIENT_GONE):
            await websocket.close(SERVICE_RESTART, "the server is shutting down")
