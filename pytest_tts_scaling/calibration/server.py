"""A real HTTP/1.1 chunked streaming server whose true Q_max is known.

It serves by a service discipline (`disciplines.py`: K slots, random service times, batching)
and shows the faults it is given (admission gate, errors, stalls, a WAV header, a slow /ping).
The body is raw PCM, JSON lines carrying base64 audio (`jsonl`), server-sent events carrying
base64 audio as OpenAI's speech API sends them (`sse`), or one JSON document with an embedding
(`json`, sent whole at the end, as a non-TTS endpoint would). It answers at `/invocations` (the
container's contract) or, with `face="openai"`, at `/v1/audio/speech` behind a bearer key.
Response headers go out on arrival, before any queueing, so a client that took headers for audio
would be caught. It records when it wrote each request's first audio byte, so the client's TTFAB
error can be measured, and its own in-flight count (queued + executing), so the client's can
be checked.

With a closed loop of N workers and one slot, a request waits for the N − 1 ahead of it, so
TTFAB = (N − 1)·service_s + first_audio_s and Q_max = floor((SLO − first_audio_s)/service_s) + 1;
`truth.py` has the other disciplines.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import heapq
import json
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Literal, Self

import numpy as np

from pytest_tts_scaling.calibration.disciplines import Batching, Discipline, Faults, Slots
from pytest_tts_scaling.calibration.streamserver import StreamServer, close_quietly, serve
from pytest_tts_scaling.calibration.truth import serial_qmax
from pytest_tts_scaling.core.stats import time_weighted_in_flight

PCM_BYTES_PER_S = 48000  # 24 kHz, 16-bit mono, as the real container sends
SAMPLE_RATE = 24000
# `tone`: answers are a 440 Hz tone at about -12 dBFS ending in 20 ms of silence, as speech ends in
# a pause, so the audio checks have a silence level and something above it.
TONE_HZ = 440.0
TONE_AMPLITUDE = 8000
TONE_TAIL_S = 0.02


def answer_audio(audio_s: float, tone: bool) -> bytes:
    """`audio_s` of 16-bit PCM: zeros, or the tone with its silent tail."""
    samples = int(SAMPLE_RATE * audio_s)
    if not tone:
        return bytes(2 * samples)
    voiced = max(0, samples - int(SAMPLE_RATE * TONE_TAIL_S))
    t = np.arange(voiced) / SAMPLE_RATE
    wave = np.zeros(samples, dtype="<i2")
    wave[:voiced] = np.rint(TONE_AMPLITUDE * np.sin(2 * np.pi * TONE_HZ * t))
    return wave.tobytes()


def split_audio(audio: bytes, parts: int) -> list[bytes]:
    """At most `parts` pieces of whole samples (the last may be shorter; none is empty, which
    would end a chunked body)."""
    size = max(2, 2 * -(-len(audio) // (2 * parts)))
    return [audio[i : i + size] for i in range(0, len(audio), size)] or [b""]


OPENAI_PATH = "/v1/audio/speech"
# OpenAI's speech events: audio deltas, then one that ends the answer.
SSE_DELTA, SSE_DONE = "speech.audio.delta", "speech.audio.done"


def wav_header_with_list_chunk() -> bytes:
    """A streaming WAV header (unknown sizes) with a LIST chunk between `fmt ` and `data`.

    Longer than the 44 bytes a client might assume, so only a client that reads the chunk
    layout finds where the audio starts.
    """
    fmt = struct.pack("<HHIIHH", 1, 1, SAMPLE_RATE, PCM_BYTES_PER_S, 2, 16)
    software = b"pytest-tts-scaling calibration\x00\x00"
    info = b"INFO" + b"ISFT" + struct.pack("<I", len(software)) + software
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"LIST"
        + struct.pack("<I", len(info))
        + info
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
    )


def sse_event(document: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(document).encode() + b"\n\n"


class _Drop(Exception):
    """End this connection now, mid-response."""


class _HungUp(Exception):
    """The client closed its connection mid-answer (a listener who hung up)."""


@dataclass
class SerialStreamServer:
    """The reference server; `slots` K serves K at once. `discipline` replaces the first four."""

    service_s: float = 0.1
    first_audio_s: float = 0.05
    chunks: int = 4
    slots: int = 1
    body_format: Literal["raw", "jsonl", "json", "sse"] = "raw"
    # "openai": POST /v1/audio/speech with an OpenAI body ("input", "voice"); `api_key`, when
    # set, must come as `Authorization: Bearer KEY`.
    face: Literal["invocations", "openai"] = "invocations"
    api_key: str | None = None
    # Answers carry a tone (with a silent tail) instead of zeros (see `answer_audio`).
    tone: bool = False
    # A client that closes its connection mid-answer frees the answer's slot at once (slots
    # only); otherwise the slot computes the abandoned answer to its end.
    frees_abandoned: bool = False
    host: str = "127.0.0.1"
    port: int = 0
    discipline: Discipline | None = None
    faults: Faults = field(default_factory=Faults)
    first_audio_sent_ns: dict[str, int] = field(default_factory=dict)
    # request_id -> (arrival, end) on perf_counter_ns; end is absent while in flight.
    arrived_ns: dict[str, int] = field(default_factory=dict)
    ended_ns: dict[str, int] = field(default_factory=dict)
    # request_id -> when the server noticed its client hang up (perf_counter_ns; freeing only).
    hung_up_ns: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    peak_in_flight: int = 0
    requests_seen: int = 0
    # Serving at `faults.slow_factor` times the service time (see Faults.slow_from_in_flight).
    slowed: bool = False
    _warm: bool = False
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: StreamServer | None = None
    # Notified as requests end (the loop's thread); `wait_idle` waits on it.
    _ended: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def __post_init__(self) -> None:
        if self.discipline is None:
            self.discipline = Slots(self.slots, self.service_s, self.first_audio_s)

    def true_qmax(self, slo_ms: float) -> int:
        """The Q_max a perfect client would measure against this server with one slot."""
        return serial_qmax(self.service_s, self.first_audio_s, slo_ms)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Whether every admitted request has ended within ``timeout_s``: a client reads its
        answer's last byte before the server has counted the request out."""
        with self._ended:
            return self._ended.wait_for(lambda: self.in_flight == 0, timeout_s)

    def mean_in_flight(self, start_ns: int, end_ns: int) -> float:
        """The server's own time-weighted in-flight count over a window (perf_counter_ns)."""
        arrived, ended = dict(self.arrived_ns), dict(self.ended_ns)
        intervals = [(at, ended.get(rid, end_ns)) for rid, at in arrived.items()]
        return time_weighted_in_flight(intervals, start_ns, end_ns)[0]

    def __enter__(self) -> Self:
        ready = threading.Event()

        def run_loop() -> None:
            self._loop = asyncio.new_event_loop()
            self._start_discipline()
            self._server = self._loop.run_until_complete(serve(self._handle, self.host, self.port))
            self.port = self._server.port
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run_loop, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("calibration server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        asyncio.run_coroutine_threadsafe(server.shut(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()

    def _start_discipline(self) -> None:
        """Runs on the server's loop: the shared state each discipline needs."""
        discipline = self.discipline
        assert discipline is not None
        self._handlers: set[asyncio.Task[None]] = set()
        if isinstance(discipline, Batching):
            self._waiting: collections.deque[tuple[float, asyncio.Future[None]]] = (
                collections.deque()
            )
            self._arrival = asyncio.Event()
            assert self._loop is not None
            self._batcher = self._loop.create_task(self._run_batches(discipline))
        else:
            self._free_at = [0.0] * discipline.slots
            self._service_times = discipline.service_times()
            # Freeing slots: the requests waiting for one, in order (arrival, given its start).
            self._slot_waiters: collections.deque[tuple[float, asyncio.Future[float]]] = (
                collections.deque()
            )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # asyncio lets go of a handler once its connection is lost; one still closing would then
        # be garbage-collected mid-await ("Task was destroyed but it is pending").
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "GET" and path == "/ping":
                    if self.faults.ping_delay_s and self.in_flight:
                        await asyncio.sleep(self.faults.ping_delay_s)
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    await writer.drain()
                    continue
                refusal = self._refusal(method, path, headers, body)
                if refusal is not None:
                    await self._refuse(writer, *refusal)
                    continue
                request_id = headers.get("x-request-id") or json.loads(body or b"{}").get(
                    "request_id", ""
                )
                await self._invocation(reader, writer, request_id)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, _Drop):
            pass
        except asyncio.CancelledError:
            # Only the server's own shutdown cancels a handler; end it quietly.
            pass
        finally:
            await close_quietly(writer)
            self._handlers.discard(task)

    def _refusal(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str] | None:
        """The status and error code a request that this face does not serve gets, else None."""
        if self.face == "invocations":
            return None
        if method != "POST" or path != OPENAI_PATH:
            return 404, "not_found"
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, "invalid_api_key"
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        if not isinstance(document, dict) or not document.get("input") or "voice" not in document:
            return 400, "invalid_request"  # an OpenAI speech body has "input" and "voice"
        return None

    async def _refuse(self, writer: asyncio.StreamWriter, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        writer.write(
            b"HTTP/1.1 %d Refused\r\ncontent-type: application/json\r\ncontent-length: %d"
            b"\r\n\r\n%s" % (status, len(body), body)
        )
        await writer.drain()

    async def _invocation(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request_id: str
    ) -> None:
        faults = self.faults
        seq = self.requests_seen
        self.requests_seen += 1
        if faults.stop_after is not None and seq >= faults.stop_after:
            await asyncio.Event().wait()  # never answers; the server's shutdown ends it
        if faults.max_queue_depth and self.in_flight >= faults.max_queue_depth:
            await self._saturated(writer, request_id)
            return
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        if faults.slow_from_in_flight and self.in_flight >= faults.slow_from_in_flight:
            self.slowed = True
        self.arrived_ns[request_id] = time.perf_counter_ns()
        try:
            await self._respond(
                reader,
                writer,
                request_id,
                drop=bool(faults.error_every)
                and (seq % faults.error_every == faults.error_every - 1),
                truncate=bool(faults.truncate_above) and self.in_flight > faults.truncate_above,
            )
        finally:
            self.ended_ns[request_id] = time.perf_counter_ns()
            with self._ended:
                self.in_flight -= 1
                self._ended.notify_all()

    async def _saturated(self, writer: asyncio.StreamWriter, request_id: str) -> None:
        """The real container's gate answer (container/tts_container/gate.py)."""
        body = json.dumps(
            {
                "error": "queue_saturated",
                "queue_depth": self.in_flight,
                "max_queue_depth": self.faults.max_queue_depth,
            }
        ).encode()
        writer.write(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nretry-after: 1\r\nx-request-id: %s\r\n\r\n%s"
            % (len(body), request_id.encode("latin-1"), body)
        )
        await writer.drain()

    async def _respond(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request_id: str,
        drop: bool,
        truncate: bool = False,
    ) -> None:
        arrived = time.perf_counter()
        faults = self.faults
        if faults.wav_header:
            kind = b"audio/wav"
        elif self.body_format == "sse":
            kind = b"text/event-stream"
        elif self.body_format != "raw":
            kind = b"application/json"
        else:
            kind = b"audio/pcm;rate=24000"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n" % kind
        )
        await writer.drain()
        if drop:
            raise _Drop
        if faults.wav_header:
            await self._chunk(writer, wav_header_with_list_chunk())
        if faults.stall_after_headers:
            await asyncio.Event().wait()
        if faults.cold_first_s and not self._warm:
            self._warm = True
            await asyncio.sleep(faults.cold_first_s)
            arrived = time.perf_counter()
        if isinstance(self.discipline, Batching):
            await self._batch_member(arrived)
            await self._audio(writer, request_id, time.perf_counter(), 0.0, 0.0, truncate)
        elif self.frees_abandoned:
            await self._freeing_slot(reader, writer, request_id, arrived, truncate)
        else:
            assert isinstance(self.discipline, Slots)
            start, service_s = self._take_slot(arrived)
            first_s = min(self.discipline.first_audio_s, service_s)
            await self._audio(writer, request_id, start, first_s, service_s, truncate)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _freeing_slot(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request_id: str,
        arrived: float,
        truncate: bool,
    ) -> None:
        """Serve on a slot that is given up the moment the client closes its connection.

        The client sends nothing while its answer streams, so a read that ends is a hang-up.
        """
        assert isinstance(self.discipline, Slots)
        start, service_s = await self._acquire_slot(arrived)
        freed_at = start + service_s
        closed = asyncio.ensure_future(reader.read(1))
        try:
            first_s = min(self.discipline.first_audio_s, service_s)
            await self._audio(writer, request_id, start, first_s, service_s, truncate, closed)
        except (_HungUp, ConnectionError):
            freed_at = time.perf_counter()
            self.hung_up_ns[request_id] = time.perf_counter_ns()
            raise _Drop from None
        finally:
            self._release_slot(freed_at)
            closed.cancel()  # and wait for it: the connection's next request reads after it
            await asyncio.gather(closed, return_exceptions=True)

    async def _acquire_slot(self, arrived: float) -> tuple[float, float]:
        """Start and service time on a freeing slot: FIFO, on ideal times like `_take_slot`."""
        if self._free_at and not self._slot_waiters:
            start = max(arrived, heapq.heappop(self._free_at))
        else:
            given: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            self._slot_waiters.append((arrived, given))
            start = await given
        return start, self._service_times.next()

    def _release_slot(self, at: float) -> None:
        """A slot frees at `at`: to the first waiter, else back to the idle ones."""
        while self._slot_waiters:
            arrived, given = self._slot_waiters.popleft()
            if not given.done():  # (a waiter the server's shutdown cancelled is passed over)
                given.set_result(max(arrived, at))
                return
        heapq.heappush(self._free_at, at)

    async def _audio(
        self,
        writer: asyncio.StreamWriter,
        request_id: str,
        started: float,
        first_s: float,
        service_s: float,
        truncate: bool = False,
        closed: asyncio.Future[bytes] | None = None,
    ) -> None:
        """The body's chunks as `Faults.answer_pieces` times them: the first at started +
        first_s, the last at started + service_s; a truncated answer ends after half of them.
        `closed`, when given, ends when the client closes: then the answer stops there
        (`_HungUp`)."""
        # The nominal length, whatever this request's service time: a text's audio does not
        # change with how long it took to compute (random service times, a batch sent at once).
        audio_s = self.service_s
        speech = split_audio(answer_audio(audio_s, self.tone), max(1, self.chunks))
        timed = [
            (started + at, answer_audio(lead, tone=False) + (b"" if i is None else speech[i]))
            for at, lead, i in self.faults.answer_pieces(first_s, service_s, max(1, self.chunks))
            if i is None or i < len(speech)
        ]
        if truncate:
            timed = timed[: max(1, len(timed) // 2)]
        for index, (deadline, audio) in enumerate(timed):
            wait_s = max(0.0, deadline - time.perf_counter())
            if closed is None:
                await asyncio.sleep(wait_s)
            elif (await asyncio.wait({closed}, timeout=wait_s))[0]:
                raise _HungUp
            if self.body_format == "json":
                continue
            chunk = audio
            if self.body_format == "jsonl":
                encoded = base64.b64encode(audio).decode()
                chunk = json.dumps({"audio": encoded, "index": index}).encode() + b"\n"
            elif self.body_format == "sse":
                encoded = base64.b64encode(audio).decode()
                chunk = sse_event({"type": SSE_DELTA, "audio": encoded})
            if index == 0:  # before the write: a client cannot read the audio any sooner
                self.first_audio_sent_ns[request_id] = time.perf_counter_ns()
            await self._chunk(writer, chunk)
        if self.body_format == "sse":
            await self._chunk(writer, sse_event({"type": SSE_DONE}))
        if self.body_format == "json":
            document = json.dumps({"embedding": [0.125] * 384, "request_id": request_id})
            self.first_audio_sent_ns[request_id] = time.perf_counter_ns()
            await self._chunk(writer, document.encode())

    async def _chunk(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()

    def _take_slot(self, arrived: float) -> tuple[float, float]:
        """Start and service time of a request, on the slot that frees first (FIFO).

        The schedule runs on ideal times (a slot frees at its previous request's deadline, not
        when the loop got round to it), so event-loop lateness never accumulates into TTFAB.
        """
        start = max(arrived, heapq.heappop(self._free_at))
        service_s = self._service_times.next() * (self.faults.slow_factor if self.slowed else 1.0)
        heapq.heappush(self._free_at, start + service_s)
        return start, service_s

    async def _batch_member(self, arrived: float) -> None:
        """Wait in line until a batch that holds this request has been computed."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((arrived, done))
        self._arrival.set()
        await done

    async def _run_batches(self, batching: Batching) -> None:
        """The executor: collect for the window, take up to max_batch in order, compute.

        On ideal times like the slots: a batch takes only requests that arrived by its start.
        """
        free_at = 0.0
        while True:
            while not self._waiting:
                self._arrival.clear()
                await self._arrival.wait()
            start = max(free_at, self._waiting[0][0]) + batching.window_s
            await asyncio.sleep(max(0.0, start - time.perf_counter()))
            batch: list[asyncio.Future[None]] = []
            while self._waiting and len(batch) < batching.max_batch:
                if self._waiting[0][0] > start:
                    break
                batch.append(self._waiting.popleft()[1])
            free_at = start + batching.batch_s(len(batch))
            await asyncio.sleep(max(0.0, free_at - time.perf_counter()))
            for member in batch:
                if not member.done():
                    member.set_result(None)
