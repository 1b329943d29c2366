"""The closed-loop load engine: N workers, each with exactly one request in flight.

A slow server cannot make a closed loop send less than N (no coordinated omission): a worker
sends its next request the moment the previous one ends. Every loop here is bounded by time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_tts_scaling.records import RequestRecord, RequestSpec, StreamTimer
from pytest_tts_scaling.transports import Transport

# After a rejection or an error a worker pauses this long, so a full admission gate or a dead
# server does not turn the client into a busy loop; it is far below any service time.
REJECTION_BACKOFF_S = 0.05
# Requests still running when the load stops get this long to finish before they are cancelled.
DRAIN_S = 30.0

MakeRequest = Callable[[int, int], RequestSpec]
ShouldExtend = Callable[[list[RequestRecord]], bool]


class ClosedLoop:
    """N workers over one transport until :meth:`stop`; records accumulate as requests end."""

    def __init__(
        self,
        transport: Transport,
        make_request: MakeRequest,
        *,
        concurrency: int,
        label: int | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ):
        self.transport = transport
        self.make_request = make_request
        self.concurrency = concurrency
        self.label = concurrency if label is None else label
        self.on_record = on_record
        self.epoch_offset_ns = time.time_ns() - time.perf_counter_ns()
        self.records: list[RequestRecord] = []
        self.session_errors: list[str] = []
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> ClosedLoop:
        self._tasks = [asyncio.create_task(self._worker(i)) for i in range(self.concurrency)]
        return self

    async def wait(self, seconds: float) -> None:
        """Sleep while the load runs, waking early only to surface a worker that died."""
        if seconds > 0:
            await asyncio.wait(self._tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
        self._raise_worker_error()

    async def stop(self, drain_s: float = DRAIN_S) -> None:
        """Send nothing new; give running requests `drain_s` to finish, then cancel them."""
        self._stopping.set()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=drain_s)
        for task in pending:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._raise_worker_error()

    def _raise_worker_error(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled() and (error := task.exception()) is not None:
                raise error

    def _keep(self, record: RequestRecord) -> None:
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    async def _worker(self, index: int) -> None:
        seq = 0
        while not self._stopping.is_set():
            try:
                async with self.transport.session() as session:
                    while not self._stopping.is_set():
                        spec = self.make_request(index, seq)
                        seq += 1
                        timer = StreamTimer(spec.audio, decoder=spec.decoder())
                        try:
                            await session.send(spec, timer)
                        finally:
                            if timer.start_ns is not None:
                                if timer.end_ns is None:
                                    timer.finished("timeout", "cancelled_at_drain")
                                self._keep(
                                    RequestRecord.from_timer(
                                        timer,
                                        spec,
                                        rung=self.label,
                                        worker=index,
                                        epoch_offset_ns=self.epoch_offset_ns,
                                    )
                                )
                        if timer.status in ("rejected", "error"):
                            await asyncio.sleep(REJECTION_BACKOFF_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken session is reopened; the error is reported
                self.session_errors.append(f"worker {index}: {type(exc).__name__}: {exc}")
                if len(self.session_errors) > 10 * self.concurrency:
                    raise
                await asyncio.sleep(REJECTION_BACKOFF_S)


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
    session_errors: list[str] = field(default_factory=list)

    @property
    def measure_s(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e9

    def in_window(self) -> list[RequestRecord]:
        """Requests that ended inside the measured window."""
        return ended_between(self.records, self.window_start_ns, self.window_end_ns)


async def run_rung(
    transport: Transport,
    make_request: MakeRequest,
    *,
    concurrency: int,
    hold_s: float,
    measure_s: float,
    should_extend: ShouldExtend | None = None,
    max_extensions: int = 0,
) -> RungRun:
    """Hold `concurrency` workers for `hold_s`; the last `measure_s` is the measured window.

    When `should_extend` says the window's evidence is not conclusive, the hold goes on for one
    more `measure_s` and the window grows, at most `max_extensions` times.
    """
    loop = ClosedLoop(transport, make_request, concurrency=concurrency)
    started = time.perf_counter_ns()
    window_start = started + int((hold_s - measure_s) * 1e9)
    window_end = started + int(hold_s * 1e9)
    extensions = 0
    loop.start()
    try:
        while True:
            await loop.wait((window_end - time.perf_counter_ns()) / 1e9)
            if (
                should_extend is None
                or extensions >= max_extensions
                or not should_extend(ended_between(loop.records, window_start, window_end))
            ):
                break
            extensions += 1
            window_end += int(measure_s * 1e9)
    finally:
        await loop.stop()
    return RungRun(
        concurrency=concurrency,
        records=loop.records,
        started_ns=started,
        window_start_ns=window_start,
        window_end_ns=window_end,
        epoch_offset_ns=loop.epoch_offset_ns,
        extensions=extensions,
        session_errors=loop.session_errors,
    )


def ended_between(records: list[RequestRecord], start_ns: int, end_ns: int) -> list[RequestRecord]:
    return [r for r in records if start_ns <= r.end_ns <= end_ns]
