"""The client watches its own clock: a rung it could not keep time in is unusable, and full
garbage collections of a big heap stay out of the measurement."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.core.records import AudioFormat, RequestRecord, RequestSpec, StreamTimer
from pytest_tts_scaling.core.verdicts import RungInputs, judge
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.load.monitor import (
    NO_FULL_COLLECTIONS,
    LoopMonitor,
    client_lag_bound_ms,
    quiet_gc,
)
from pytest_tts_scaling.load.transports import Session, Transport
from pytest_tts_scaling.load.transports.http import HttpStreamTransport
from pytest_tts_scaling.steps.qmax import run_ladder
from tests.factories import qmax_inputs


def test_the_lag_bound_is_a_twentieth_of_the_slo_with_a_floor() -> None:
    assert client_lag_bound_ms(100) == 10.0
    assert client_lag_bound_ms(3000) == 150.0


def test_the_monitor_sees_a_blocked_loop_and_a_busy_thread() -> None:
    async def go() -> tuple[LoopMonitor, list[int]]:
        monitor = LoopMonitor()
        ticker = asyncio.create_task(monitor.run())
        marks = [time.perf_counter_ns()]
        await asyncio.sleep(0.2)  # idle
        marks.append(time.perf_counter_ns())
        time.sleep(0.1)  # noqa: ASYNC251 - the loop is blocked: the ticker wakes 100 ms late
        await asyncio.sleep(0.05)
        marks.append(time.perf_counter_ns())
        busy_until = time.perf_counter() + 0.3
        while time.perf_counter() < busy_until:  # then busy on the CPU
            pass
        gc.collect()  # and one full collection
        await asyncio.sleep(0.03)
        marks.append(time.perf_counter_ns())
        ticker.cancel()
        return monitor, marks

    monitor, (start, blocked, busy, end) = asyncio.run(go())
    idle = monitor.window(start, blocked)
    assert idle.ticks > 10
    assert idle.lag_p50_ms is not None
    assert idle.lag_p50_ms < 20
    assert idle.cpu_share is not None
    whole = monitor.window(start, end)
    assert whole.lag_max_ms is not None
    assert whole.lag_max_ms >= 90
    # The loop thread's own CPU time: whatever share the machine gave the busy loop, it is
    # far above the idle share.
    spinning = monitor.window(busy - 10_000_000, end)
    assert spinning.cpu_share is not None
    assert spinning.cpu_share > max(0.2, 3 * idle.cpu_share)
    assert spinning.gc_full_collections == 1
    assert spinning.gc_max_ms is not None
    assert spinning.gc_max_ms > 0
    assert idle.gc_full_collections == 0
    assert monitor.window(end + 10**9, end + 2 * 10**9).ticks == 0


def test_first_audio_read_while_the_loop_was_overdue_is_charged_the_delay() -> None:
    monitor = LoopMonitor()
    # Ticks at 10, 20 ms on time; the tick due at 25 ms ran at 65 ms (40 ms late): bytes read
    # before it may have waited since the loop last ran the ticker, at 20 ms.
    for at_ms, late_ms in [(10, 0.0), (20, 0.0), (65, 40.0), (70, 0.5)]:
        monitor.at_ns.append(at_ms * 1_000_000)
        monitor.late_ms.append(late_ms)
        monitor.cpu_ns.append(0)
    delays = monitor.delays_ms([15_000_000, 30_000_000, 64_000_000, 69_900_000, 90_000_000])
    assert list(delays) == pytest.approx([0.0, 10.0, 44.0, 0.4, 0.0])
    stats = monitor.window(0, 80_000_000, [30_000_000] * 196 + [64_000_000] * 4)
    assert stats.first_audio_lag_p99_ms == pytest.approx(44.0, abs=0.5)
    assert monitor.window(0, 80_000_000, [64_000_000] * 199).first_audio_lag_p99_ms is None
    assert stats.lag_p99_ms is not None
    assert stats.first_audio_lag_p99_ms is not None
    assert stats.worst_lag_p99_ms == max(stats.lag_p99_ms, stats.first_audio_lag_p99_ms)


def test_quiet_gc_freezes_the_heap_and_holds_full_collections_back() -> None:
    thresholds = gc.get_threshold()
    with quiet_gc():
        assert gc.get_threshold() == (thresholds[0], thresholds[1], NO_FULL_COLLECTIONS)
        assert gc.get_freeze_count() > 0
        assert gc.isenabled()
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == 0


def test_a_full_collection_inside_a_rung_skips_the_frozen_heap() -> None:
    """A heap the size of a whole pytest collection costs a full pass outside, not inside."""
    heap = [[i] for i in range(400_000)]

    def full_pass_s() -> float:
        started = time.perf_counter()
        gc.collect()
        return time.perf_counter() - started

    outside = min(full_pass_s() for _ in range(3))
    with quiet_gc():
        inside = min(full_pass_s() for _ in range(3))
    del heap
    assert inside < outside / 3


def answered(i: int) -> RequestRecord:
    """Request `i` of a steady window: starts every 10 ms, first audio 50 ms later."""
    ticks = iter([i * 10_000_000, i * 10_000_000 + 50_000_000, i * 10_000_000 + 60_000_000])
    timer = StreamTimer(AudioFormat(), clock_ns=lambda: next(ticks))
    timer.started()
    timer.body(b"\x00\x00")
    timer.finished("ok")
    return RequestRecord.from_timer(
        timer, RequestSpec(str(i), {}), rung=4, worker=0, epoch_offset_ns=0
    )


def inputs(lag_ms: float | None, mean: float = 4.0) -> RungInputs:
    window = [answered(i) for i in range(40)]
    return RungInputs(
        concurrency=4,
        window=window,
        measure_s=1.0,
        concurrency_mean=mean,
        concurrency_max=4.0,
        client_lag_p99_ms=lag_ms,
        client_lag_bound_ms=10.0,
    )


def reason(rung: RungInputs) -> str | None:
    return judge(rung, 200.0).unusable_reason


def test_a_late_clock_makes_the_rung_unusable_before_its_own_count_is_believed() -> None:
    assert reason(inputs(25.0)) == "client_saturated"
    # The client's own in-flight count is not trusted while its clock is late.
    assert reason(inputs(25.0, mean=2.0)) == "client_saturated"
    assert reason(inputs(2.0, mean=2.0)) == "client_could_not_hold"
    assert reason(inputs(None)) is None
    assert reason(inputs(5.0)) is None


class HogTransport(Transport):
    """Plain HTTP, but from 2 workers on, each request first blocks the event loop (a CPU
    hog inside the client): the client can no longer keep time."""

    name = "response-stream"

    def __init__(self, base_url: str, *, concurrency: int, hog_s: float):
        self.inner = HttpStreamTransport(base_url)
        self.hog_s = hog_s if concurrency >= 2 else 0.0

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        async with self.inner.session() as inner:
            yield _HogSession(inner, self.hog_s)


class _HogSession:
    def __init__(self, inner: Session, hog_s: float):
        self.inner = inner
        self.hog_s = hog_s

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        time.sleep(self.hog_s)  # noqa: ASYNC251 - the point: the client's loop is blocked
        await self.inner.send(request, timer)


class HogEndpoint(UrlEndpoint):
    def transport(self, name: str, *, concurrency: int) -> Transport:
        return HogTransport(self.base_url, concurrency=concurrency, hog_s=0.08)


def test_a_rung_the_client_could_not_keep_time_in_is_client_saturated(tmp_path: Path) -> None:
    settings = qmax_inputs(
        ladder=(1, 2),
        slo_ms=1000,
        hold_s=1.5,
        measure_s=1.0,
        gap_s=0,
        artifacts_dir=tmp_path,
        endpoint_url="http://127.0.0.1:1",
    )
    with SerialStreamServer(service_s=0.05, first_audio_s=0.02, slots=2) as server:
        result = run_ladder(HogEndpoint(server.base_url), settings, progress=print)
    by_n = {r.concurrency: r for r in result.artifact.rungs}
    one, two = by_n[1], by_n[2]
    assert one.client is not None
    assert two.client is not None
    assert one.client.lag_bound_ms == two.client.lag_bound_ms == 50.0
    assert one.unusable_reason != "client_saturated"
    assert one.client.lag_p99_ms is not None
    assert one.client.lag_p99_ms < 50.0
    assert two.unusable_reason == "client_saturated"
    assert two.client.lag_p99_ms is not None
    assert two.client.lag_p99_ms >= 50.0
    assert two.client.kept_time_up_to == 1
    [line] = [s for s in result.summary_lines() if "could not keep time" in s]
    assert "at N=2" in line
    assert "kept time up to N=1" in line


@pytest.mark.parametrize("slo_ms", [100.0, 3000.0])
def test_lag_bound_never_below_the_floor(slo_ms: float) -> None:
    assert client_lag_bound_ms(slo_ms) >= 10.0
