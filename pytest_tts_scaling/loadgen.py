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

# After a rejection a worker pauses this long, so a full admission gate does not turn the client
# into a busy loop of 503s; it is far below any service time and is reported in the artifact.
REJECTION_BACKOFF_S = 0.05
# Requests still running when the hold ends get this long to finish before they are cancelled.
DRAIN_S = 30.0

MakeRequest = Callable[[int, int], RequestSpec]
ShouldExtend = Callable[[list[RequestRecord]], bool]


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
        return [r for r in self.records if self.window_start_ns <= r.end_ns <= self.window_end_ns]


async def run_rung(
    transport: Transport,
    make_request: MakeRequest,
    *,
    concurrency: int,
    hold_s: float,
    measure_s: float,
    should_extend: ShouldExtend | None = None,
    max_extensions: int = 0,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> RungRun:
    """Hold `concurrency` workers for `hold_s`; the last `measure_s` is the measured window.

    When `should_extend` says the window's evidence is not conclusive, the hold goes on for one
    more `measure_s` and the window grows, at most `max_extensions` times.
    """
    clock = time.perf_counter_ns
    epoch_offset = time.time_ns() - clock()
    started = clock()
    window_start = started + int((hold_s - measure_s) * 1e9)
    window_end = started + int(hold_s * 1e9)
    records: list[RequestRecord] = []
    session_errors: list[str] = []
    stop = asyncio.Event()

    def keep(record: RequestRecord) -> None:
        records.append(record)
        if on_record is not None:
            on_record(record)

    async def worker(index: int) -> None:
        seq = 0
        while not stop.is_set():
            try:
                async with transport.session() as session:
                    while not stop.is_set():
                        spec = make_request(index, seq)
                        seq += 1
                        timer = StreamTimer(spec.audio)
                        try:
                            await session.send(spec, timer)
                        finally:
                            if timer.start_ns is not None:
                                if timer.end_ns is None:
                                    timer.finished("timeout", "cancelled_at_drain")
                                keep(
                                    RequestRecord.from_timer(
                                        timer,
                                        spec,
                                        rung=concurrency,
                                        worker=index,
                                        epoch_offset_ns=epoch_offset,
                                    )
                                )
                        if timer.status == "rejected":
                            await asyncio.sleep(REJECTION_BACKOFF_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken session is reopened; the error is reported
                session_errors.append(f"worker {index}: {type(exc).__name__}: {exc}")
                if len(session_errors) > 10 * concurrency:
                    raise
                await asyncio.sleep(REJECTION_BACKOFF_S)

    tasks = [asyncio.create_task(worker(i)) for i in range(concurrency)]
    extensions = 0
    try:
        while True:
            await _sleep_until(window_end, tasks)
            if (
                should_extend is None
                or extensions >= max_extensions
                or not should_extend(_ended_between(records, window_start, window_end))
            ):
                break
            extensions += 1
            window_end += int(measure_s * 1e9)
        stop.set()
        _, pending = await asyncio.wait(tasks, timeout=DRAIN_S)
        for task in pending:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pending, return_exceptions=True)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return RungRun(
        concurrency=concurrency,
        records=records,
        started_ns=started,
        window_start_ns=window_start,
        window_end_ns=window_end,
        epoch_offset_ns=epoch_offset,
        extensions=extensions,
        session_errors=session_errors,
    )


async def _sleep_until(deadline_ns: int, tasks: list[asyncio.Task[None]]) -> None:
    """Sleep to the deadline, waking early only if a worker died (its error then surfaces)."""
    remaining = (deadline_ns - time.perf_counter_ns()) / 1e9
    if remaining > 0:
        await asyncio.wait(tasks, timeout=remaining, return_when=asyncio.FIRST_EXCEPTION)


def _ended_between(records: list[RequestRecord], start: int, end: int) -> list[RequestRecord]:
    return [r for r in records if start <= r.end_ns <= end]
