"""The closed-loop load engine: N workers, each with exactly one request in flight.

A slow server cannot make a closed loop send less than N (no coordinated omission): a worker
sends its next request the moment the previous one ends. Every loop here is bounded by time.

The engine also watches the endpoint (and, through :class:`LoopMonitor`, itself): a request
that hears nothing for the stall bound is cut, and a loop that sees no answer at all for that
long says the endpoint stopped answering, so a dead or stalled server ends a rung in seconds. A
request still waiting for its first audio while others are answered is cut as
`waited_past_bound` (a queue, not a fault); once audio flows, a silent stream of a live endpoint
is an underrun and is not cut; when nothing is answered, everything open is cut as `stalled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_tts_scaling.core.records import (
    STALLED,
    WAITED_PAST_BOUND,
    RequestRecord,
    RequestSpec,
    StreamTimer,
)
from pytest_tts_scaling.core.schema import ClientTiming
from pytest_tts_scaling.load.monitor import LoopMonitor, quiet_gc
from pytest_tts_scaling.load.transports import Session, Transport, named

# After a rejection or an error a worker pauses this long, so a full admission gate or a dead
# server does not turn the client into a busy loop; it is far below any service time.
REJECTION_BACKOFF_S = 0.05
# Requests still running when the load stops get at most this long to finish; a request that
# hears nothing for the stall bound is cut sooner.
DRAIN_S = 30.0
# How often open requests are checked for a stall.
STALL_SCAN_S = 0.1
# The stall bound: no byte for this long is not a slow answer but no answer
# (docs/method.md#endpoint-health).
STALL_FLOOR_S = 5.0
STALL_SLO_FACTOR = 2.0
# With more streams in flight one stream's silences grow; this many times the longest silence of a
# lone request is still a slow endpoint, not a stopped one.
STALL_ALONE_FACTOR = 3.0

# A rung may end before its window does only after this share of the window, and is asked
# whether to about ten times a window (never more often than EARLY_CHECK_FLOOR_S).
EARLY_END_AFTER_SHARE = 1 / 3
EARLY_CHECKS_PER_WINDOW = 10
EARLY_CHECK_FLOOR_S = 0.1

MakeRequest = Callable[[int, int], RequestSpec]
# Given the requests that ended in the window and its length (s): how many seconds more it needs
# (0: none).
ShouldExtend = Callable[[list[RequestRecord], float], float]
# A delivered answer and its audio bytes (for checks run after the rung), once the load stops.
OnAudio = Callable[[RequestRecord, bytes], None]
# Given the window's start and now (monotonic ns): whether what the window holds so far already
# decides the rung, so it can end now.
ShouldEnd = Callable[[int, int], bool]


def stall_bound_s(slo_ms: float, quietest_s: float = 0.0) -> float:
    """How long a request may hear nothing before it is cut: past twice the SLO its TTFAB is a
    failure whatever comes, and a few seconds absorb a pause of the network. `quietest_s`, the
    longest silence of one request alone (the health probe's), raises it: an endpoint that
    computes a segment for seconds before sending it is slow, not stopped."""
    return max(STALL_FLOOR_S, STALL_SLO_FACTOR * slo_ms / 1000.0, STALL_ALONE_FACTOR * quietest_s)


def silence_kept_s(slo_ms: float) -> float:
    """The longest silence of a lone request that leaves `stall_bound_s(slo_ms)` as it is."""
    return stall_bound_s(slo_ms) / STALL_ALONE_FACTOR


class ClosedLoop:
    """N workers over one transport until :meth:`stop`; records accumulate as requests end.

    With `stall_s`: a request still waiting for its body after that long while others are
    answered is cut as `waited_past_bound`; a stream whose audio began is not cut while the
    endpoint answers; when no request has been answered for that long, every open request is
    cut as `stalled`, :attr:`stopped_answering` is set and :meth:`wait` returns early.

    A request's record is made as it ends with its timing only; its audio levels (and
    `on_audio`) wait for :meth:`stop`, so what each end costs the loop stays small beside the
    other streams' reads being stamped.
    """

    def __init__(
        self,
        transport: Transport,
        make_request: MakeRequest,
        *,
        concurrency: int,
        label: int | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
        stall_s: float | None = None,
        on_audio: OnAudio | None = None,
    ):
        self.transport = transport
        self.make_request = make_request
        self.concurrency = concurrency
        self.label = concurrency if label is None else label
        self.on_record = on_record
        self.on_audio = on_audio
        self.stall_s = stall_s
        self.epoch_offset_ns = time.time_ns() - time.perf_counter_ns()
        self.records: list[RequestRecord] = []
        # Delivered answers whose audio is read once the load stops: (index in records, timer).
        self._answers: list[tuple[int, StreamTimer]] = []
        self.session_errors: list[str] = []
        self.monitor = LoopMonitor()
        self.stopped_answering = asyncio.Event()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._watchers: list[asyncio.Task[object]] = []
        self._open: dict[int, StreamTimer] = {}
        # Workers whose request is being cut for silence, and the code it ends with.
        self._cut: dict[int, str] = {}
        self._last_answer_ns = 0

    def start(self) -> ClosedLoop:
        self._last_answer_ns = time.perf_counter_ns()
        self._watchers = [asyncio.create_task(self.monitor.run())]
        if self.stall_s is not None:
            self._watchers.append(asyncio.create_task(self._watch_stalls(self.stall_s)))
        self._tasks = [asyncio.create_task(self._worker(i)) for i in range(self.concurrency)]
        return self

    async def wait(self, seconds: float) -> None:
        """Sleep while the load runs, waking early for a worker that died or a silent endpoint."""
        if seconds > 0 and not self.stopped_answering.is_set():
            silent = asyncio.create_task(self.stopped_answering.wait())
            try:
                await asyncio.wait(
                    [*self._tasks, silent], timeout=seconds, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                silent.cancel()
        self._raise_worker_error()

    async def wait_for(self, done: Callable[[], bool], timeout_s: float) -> None:
        """Until `done()` holds, the endpoint stops answering, or `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while not done() and not self.stopped_answering.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await self.wait(min(left, 0.02))

    async def stop(self, drain_s: float = DRAIN_S) -> None:
        """Send nothing new; give running requests `drain_s` to finish, then cancel them.

        An endpoint that stopped answering gets no drain: there is nothing to wait for.
        """
        self._stopping.set()
        if self._tasks:
            pending = {t for t in self._tasks if not t.done()}
            if pending and not self.stopped_answering.is_set() and drain_s > 0:
                _, pending = await asyncio.wait(pending, timeout=drain_s)
            for task in pending:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._tasks, return_exceptions=True)
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._read_answers()
        self._raise_worker_error()

    def _raise_worker_error(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled() and (error := task.exception()) is not None:
                raise error

    def _keep(self, record: RequestRecord, timer: StreamTimer) -> None:
        self.records.append(record)
        if record.status == "ok":
            self._last_answer_ns = record.end_ns
            self._answers.append((len(self.records) - 1, timer))
        if self.on_record is not None:
            self.on_record(record)

    def _read_answers(self) -> None:
        """Each delivered answer's audio levels into its record, and `on_audio`, in end order."""
        answers, self._answers = self._answers, []
        for index, timer in answers:
            record = self.records[index] = self.records[index].with_levels(timer)
            if self.on_audio is not None and timer.decoder is not None and not record.hung_up:
                self.on_audio(record, bytes(timer.decoder.payload))

    async def _watch_stalls(self, stall_s: float) -> None:
        """Cut requests that heard nothing for `stall_s`; notice when nothing is answered."""
        stall_ns = int(stall_s * 1e9)
        while True:
            await asyncio.sleep(STALL_SCAN_S)
            now = time.perf_counter_ns()
            running = [(i, t) for i, t in self._open.items() if t.end_ns is None]
            quiet = {i: now - (t.last_activity_ns or now) for i, t in running}
            # Answering: something came back within the bound, or audio flows on a long answer.
            answering = now - self._last_answer_ns < stall_ns or any(
                t.first_audio_ns is not None and quiet[i] < stall_ns for i, t in running
            )
            for index, timer in running:
                if index in self._cut:
                    continue
                if answering and (timer.first_audio_ns is not None or quiet[index] < stall_ns):
                    continue  # a silent stream of a live endpoint underruns: it is not cut
                # Past the bound with nothing of its body yet while others are answered: it
                # waited in a queue. Body bytes and then silence, or nothing answered: stalled.
                queued = answering and timer.last_activity_ns == timer.start_ns
                self._cut[index] = WAITED_PAST_BOUND if queued else STALLED
                self._tasks[index].cancel()
            if not answering:
                self.stopped_answering.set()

    async def _worker(self, index: int) -> None:
        seq = 0
        connection_errors = self.transport.connection_errors
        while not self._stopping.is_set():
            opened = False
            try:
                async with self.transport.session() as session:
                    opened = True
                    while not self._stopping.is_set():
                        spec = self.make_request(index, seq)
                        seq += 1
                        timer = await self._exchange(index, session, spec)
                        if timer.error_code in (STALLED, WAITED_PAST_BOUND):
                            break  # the session was cut mid-exchange: open a new one
                        if timer.status in ("rejected", "error"):
                            await asyncio.sleep(REJECTION_BACKOFF_S)
            except asyncio.CancelledError:
                raise
            except connection_errors as exc:
                if not opened:  # the request this worker meant to send failed too
                    spec = self.make_request(index, seq)
                    seq += 1
                    timer = spec.timer()
                    timer.failed(named(exc))
                    self._keep(self._record(timer, spec, index), timer)
                await asyncio.sleep(REJECTION_BACKOFF_S)
            except Exception as exc:  # a broken session is reopened; the error is reported
                self.session_errors.append(f"worker {index}: {type(exc).__name__}: {exc}")
                if len(self.session_errors) > 10 * self.concurrency:
                    raise
                await asyncio.sleep(REJECTION_BACKOFF_S)

    async def _exchange(self, index: int, session: Session, spec: RequestSpec) -> StreamTimer:
        """One request on the worker's session, cut if it hears nothing too long."""
        timer = spec.timer()
        self._open[index] = timer
        try:
            await session.send(spec, timer)
        except asyncio.CancelledError:
            code = self._cut.pop(index, None)
            if code is None:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            timer.finished("timeout", code)
        finally:
            del self._open[index]
            self._cut.pop(index, None)  # a cut the transport did not let through is void
            if timer.start_ns is not None:
                if timer.end_ns is None:
                    timer.finished("timeout", "cancelled_at_drain")
                self._keep(self._record(timer, spec, index), timer)
        return timer

    def _record(self, timer: StreamTimer, spec: RequestSpec, index: int) -> RequestRecord:
        return RequestRecord.from_timer(
            timer,
            spec,
            rung=self.label,
            worker=index,
            epoch_offset_ns=self.epoch_offset_ns,
            levels=False,
        )


@dataclass
class RungRun:
    """Raw outcome of one rung: every record plus the windows on the monotonic clock (ns)."""

    concurrency: int
    records: list[RequestRecord]
    started_ns: int
    window_start_ns: int
    window_end_ns: int
    epoch_offset_ns: int
    extensions: int = 0
    # The window ended before its time: what it held had decided the rung (`should_end`).
    ended_early: bool = False
    session_errors: list[str] = field(default_factory=list)
    client: ClientTiming = field(default_factory=lambda: ClientTiming(ticks=0))
    # The endpoint answered nothing for the stall bound: the rung ended there.
    stopped_answering: bool = False

    @property
    def measure_s(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e9

    def in_window(self) -> list[RequestRecord]:
        """Requests that ended inside the measured window."""
        return ended_between(self.records, self.window_start_ns, self.window_end_ns)


@dataclass
class WindowClock:
    """Where a running rung's window stands, kept current by :func:`run_rung` for whoever
    reports its progress: the window's end moves when it is extended or ended early, and
    `draining` is set once nothing new is sent and the requests in flight are given time."""

    end_ns: int = 0
    draining: bool = False
    drain_s: float = 0.0


async def run_rung(
    transport: Transport,
    make_request: MakeRequest,
    *,
    concurrency: int,
    hold_s: float,
    measure_s: float,
    should_extend: ShouldExtend | None = None,
    max_extensions: int = 0,
    should_end: ShouldEnd | None = None,
    stall_s: float | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_audio: OnAudio | None = None,
    clock: WindowClock | None = None,
) -> RungRun:
    """Hold `concurrency` workers for `hold_s`; the last `measure_s` is the measured window.

    When `should_extend` says the window's evidence is not conclusive, the hold goes on for as
    long as it asks and the window grows, at most `max_extensions` times. When `should_end`
    says the window so far decides the rung (from a third of the window on), the window ends
    there. With `stall_s`, an endpoint that answers nothing for that long ends the rung early
    (see :class:`ClosedLoop`). `clock`, when given, follows the window (:class:`WindowClock`).
    """
    clock = clock or WindowClock()
    drain_s = DRAIN_S if stall_s is None else min(DRAIN_S, 2 * stall_s)
    with quiet_gc():
        loop = ClosedLoop(
            transport,
            make_request,
            concurrency=concurrency,
            stall_s=stall_s,
            on_record=on_record,
            on_audio=on_audio,
        )
        started = time.perf_counter_ns()
        window_start = started + int((hold_s - measure_s) * 1e9)
        window_end = clock.end_ns = started + int(hold_s * 1e9)
        extensions = 0
        ended_early = False
        earliest_end = window_start + int(EARLY_END_AFTER_SHARE * measure_s * 1e9)
        check_ns = int(max(EARLY_CHECK_FLOOR_S, measure_s / EARLY_CHECKS_PER_WINDOW) * 1e9)
        loop.start()
        try:
            while True:
                now = time.perf_counter_ns()
                until = window_end
                if should_end is not None:
                    until = min(window_end, max(earliest_end, now + check_ns))
                await loop.wait((until - now) / 1e9)
                if loop.stopped_answering.is_set():
                    break
                now = time.perf_counter_ns()
                if now < window_end:
                    if should_end is not None and now >= earliest_end:
                        ended_early = should_end(window_start, now)
                        if ended_early:
                            window_end = clock.end_ns = now
                            break
                    continue
                if should_extend is None or extensions >= max_extensions:
                    break
                window = ended_between(loop.records, window_start, window_end)
                more_s = should_extend(window, (window_end - window_start) / 1e9)
                if more_s <= 0:
                    break
                extensions += 1
                window_end += int(more_s * 1e9)
                clock.end_ns = window_end
        finally:
            clock.draining, clock.drain_s = True, drain_s
            await loop.stop(drain_s)
    return RungRun(
        concurrency=concurrency,
        records=loop.records,
        started_ns=started,
        window_start_ns=window_start,
        window_end_ns=window_end,
        epoch_offset_ns=loop.epoch_offset_ns,
        extensions=extensions,
        ended_early=ended_early,
        session_errors=loop.session_errors,
        client=loop.monitor.window(
            window_start, window_end, first_audio_between(loop.records, window_start, window_end)
        ),
        stopped_answering=loop.stopped_answering.is_set(),
    )


def first_audio_between(records: list[RequestRecord], start_ns: int, end_ns: int) -> list[int]:
    """When each request's first audio arrived, for those between two monotonic times. (A late
    loop can delay even a kernel-stamped one: by the gap to the next piece, when both waited.)"""
    times = (r.start_ns + int(r.ttfab_ms * 1e6) for r in records if r.ttfab_ms is not None)
    return [t for t in times if start_ns <= t <= end_ns]


def ended_between(records: list[RequestRecord], start_ns: int, end_ns: int) -> list[RequestRecord]:
    return [r for r in records if start_ns <= r.end_ns <= end_ns]
