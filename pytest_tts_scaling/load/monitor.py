"""The client watching itself: how late its event loop runs, its CPU, and its garbage collections.

A timestamp the closed loop takes itself is late by about as much as its event loop is: a
request's start, and a piece read over TLS, WebSocket or AWS (over plain HTTP the kernel stamps
each piece's arrival instead). A rung whose client could not keep time is not judged: its loop
also started requests late and held fewer in flight than asked. Full collections, the usual
cause of a late loop, are held back during a rung (:func:`quiet_gc`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from array import array
from collections.abc import Iterator, Sequence

import numpy as np

from pytest_tts_scaling.core.schema import ClientTiming

# The event-loop ticker's period.
TICK_S = 0.005
# A tick this late means the loop was busy (or descheduled) since the tick before.
OVERDUE_MS = 1.0
# Fewer first-audio reads than this give no p99 of their lateness (the ticker's p99 stands):
# only many streams answer in bursts.
MIN_READS_FOR_P99 = 200
# The client kept time when its event loop's p99 lateness stayed within this share of the SLO.
CLIENT_LAG_SLO_SHARE = 0.05
CLIENT_LAG_FLOOR_MS = 10.0
# Full collections are held back during a rung: automatic ones never reach this count.
NO_FULL_COLLECTIONS = 2**31 - 1


def client_lag_bound_ms(slo_ms: float) -> float:
    """How late the client's clock may run (p99 over a window) before its TTFAB cannot be held
    against this SLO: a twentieth of the SLO, and never below 10 ms."""
    return max(CLIENT_LAG_FLOOR_MS, CLIENT_LAG_SLO_SHARE * slo_ms)


class LoopMonitor:
    """How late the event loop wakes a sleeper, and how busy the loop's thread is.

    Every timestamp the loop takes itself is late by about as much as this ticker is.
    Garbage collections are timed too (one that walks the
    whole heap is the usual cause of a late clock). Samples go into arrays, which the GC does
    not track.
    """

    def __init__(self, tick_s: float = TICK_S):
        self.tick_s = tick_s
        self.at_ns = array("q")
        self.late_ms = array("d")
        self.cpu_ns = array("q")
        self.gc_at_ns = array("q")
        self.gc_ms = array("d")
        self.gc_full = array("b")
        self._gc_started_ns = 0

    async def run(self) -> None:
        tick_ns = int(self.tick_s * 1e9)
        gc.callbacks.append(self._on_gc)
        try:
            while True:
                before = time.perf_counter_ns()
                await asyncio.sleep(self.tick_s)
                now = time.perf_counter_ns()
                self.at_ns.append(now)
                self.late_ms.append(max(0, now - before - tick_ns) / 1e6)
                self.cpu_ns.append(time.thread_time_ns())
        finally:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter_ns()
        if phase == "start":
            self._gc_started_ns = now
            return
        self.gc_at_ns.append(now)
        self.gc_ms.append((now - self._gc_started_ns) / 1e6)
        self.gc_full.append(info["generation"] == 2)

    def delays_ms(self, times_ns: Sequence[int]) -> np.ndarray:
        """How late the loop may have been at each of `times_ns` (an upper bound).

        A time that falls before an overdue tick may have had its bytes waiting since the
        loop last ran the ticker: the tick before.
        """
        at = np.frombuffer(self.at_ns, dtype=np.int64)
        times = np.asarray(times_ns, dtype=np.int64)
        if at.size < 2 or times.size == 0:
            return np.zeros(times.size)
        index = np.clip(np.searchsorted(at, times, side="left"), 1, at.size - 1)
        late = np.frombuffer(self.late_ms, dtype=np.float64)[index]
        since = np.where(late >= OVERDUE_MS, at[index - 1], at[index] - late * 1e6)
        inside = (times <= at[index]) & (times >= at[index - 1])
        return np.clip(times - since, 0, None) / 1e6 * inside

    def window(
        self, start_ns: int, end_ns: int, first_audio_ns: Sequence[int] = ()
    ) -> ClientTiming:
        """Lateness percentiles and the loop thread's CPU share between two monotonic times.

        With the window's first-audio times (at least `MIN_READS_FOR_P99`), also the p99 of how
        late the loop may have been at them: answers that arrive in bursts meet a late loop more
        often than a ticker does.
        """
        at = np.frombuffer(self.at_ns, dtype=np.int64) if self.at_ns else np.zeros(0, np.int64)
        lo, hi = np.searchsorted(at, [start_ns, end_ns], side="left")
        late = np.frombuffer(self.late_ms, dtype=np.float64)[lo:hi] if hi > lo else None
        if late is None or late.size == 0:
            return ClientTiming(ticks=0)
        cpu = np.frombuffer(self.cpu_ns, dtype=np.int64)
        wall = at[hi - 1] - at[lo]
        share = float((cpu[hi - 1] - cpu[lo]) / wall) if wall > 0 else None
        gc_at = np.frombuffer(self.gc_at_ns, dtype=np.int64)
        in_window = (gc_at >= start_ns) & (gc_at <= end_ns)
        pauses = np.frombuffer(self.gc_ms, dtype=np.float64)[in_window]
        full = np.frombuffer(self.gc_full, dtype=np.int8)[in_window]
        return ClientTiming(
            ticks=int(late.size),
            lag_p50_ms=float(np.percentile(late, 50)),
            lag_p99_ms=float(np.percentile(late, 99)),
            lag_max_ms=float(late.max()),
            cpu_share=share,
            gc_collections=int(pauses.size),
            gc_full_collections=int(full.sum()),
            gc_max_ms=float(pauses.max()) if pauses.size else None,
            first_audio_lag_p99_ms=(
                float(np.percentile(self.delays_ms(first_audio_ns), 99))
                if len(first_audio_ns) >= MIN_READS_FOR_P99
                else None
            ),
        )


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """Keep full garbage collections out of the measurement.

    A full collection walks every object the process holds (a whole pytest collection, with
    aws-cdk's modules, is hundreds of thousands) and stops the event loop for as long: 100 ms
    and more, every stream's timestamps with it. So collect once before the rung, freeze what
    survived (later collections skip it), and let only young generations be collected until
    the rung ends; then collect what the rung left.
    """
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTIONS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        gc.collect()
