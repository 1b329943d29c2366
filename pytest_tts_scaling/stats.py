"""Statistics over per-request metrics (SPEC §3). Pure: numpy in, schema models out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from pytest_tts_scaling.schema import Interval, Summary

PERCENTILES = (50, 90, 95, 99)


def summarize(values: Sequence[float]) -> Summary:
    """count, mean, min, max, std, p50, p90, p95, p99; all None but count for no values."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return Summary(
            count=0, mean=None, min=None, max=None, std=None, p50=None, p90=None, p95=None, p99=None
        )
    p50, p90, p95, p99 = (float(v) for v in np.percentile(data, PERCENTILES))
    return Summary(
        count=int(data.size),
        mean=float(data.mean()),
        min=float(data.min()),
        max=float(data.max()),
        std=float(data.std(ddof=1)) if data.size > 1 else 0.0,
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
    )


def quantile_ci(values: Sequence[float], q: float = 0.95, level: float = 0.95) -> Interval | None:
    """Distribution-free confidence interval for a quantile from order statistics.

    The number of samples below the true q-quantile is Binomial(n, q); the interval is the pair of
    order statistics that brackets it with the given coverage (normal approximation to the binomial,
    widened to whole ranks). Returns None below 2 samples, where no interval exists.
    """
    data = np.sort(np.asarray(values, dtype=float))
    n = int(data.size)
    if n < 2:
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2)
    spread = z * math.sqrt(n * q * (1 - q))
    low_rank = max(0, math.floor(n * q - spread) - 1)
    high_rank = min(n - 1, math.ceil(n * q + spread))
    return Interval(low=float(data[low_rank]), high=float(data[high_rank]), level=level)


def time_weighted_in_flight(
    intervals: Sequence[tuple[float, float]], window_start: float, window_end: float
) -> tuple[float, float]:
    """Time-weighted mean and maximum number of open intervals within a window.

    Each interval is (start, end) of one request; requests still open at the window's end pass
    end = inf. This is the client-side in-flight count of SPEC §3.
    """
    span = window_end - window_start
    if span <= 0:
        return 0.0, 0.0
    events: list[tuple[float, int]] = []
    for start, end in intervals:
        lo, hi = max(start, window_start), min(end, window_end)
        if hi > lo:
            events.append((lo, 1))
            events.append((hi, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    level = area = peak = 0.0
    last = window_start
    for at, step in events:
        area += level * (at - last)
        last = at
        level += step
        peak = max(peak, level)
    return area / span, peak


def underrun_s(first_byte_at: float, chunks: Sequence[tuple[float, float]]) -> float:
    """Seconds a player that started at the first audio byte would have stalled.

    `chunks` are (arrival time, audio seconds carried) in arrival order, the first being the one
    that arrived at `first_byte_at`. The player's buffer runs dry whenever a chunk arrives after
    the audio already received has been played out.
    """
    stalled = 0.0
    play_until = first_byte_at
    for arrived, seconds in chunks:
        if arrived > play_until:
            if play_until > first_byte_at:
                stalled += arrived - play_until
            play_until = arrived
        play_until += seconds
    return stalled


def relative_drift(times: Sequence[float], values: Sequence[float]) -> float:
    """How much a metric moved across a window: median of the last third over the first third.

    Returns the ratio (1.0 = flat). Fewer than 9 samples cannot show a trend and return 1.0.
    """
    if len(values) < 9:
        return 1.0
    order = np.argsort(np.asarray(times, dtype=float))
    ordered = np.asarray(values, dtype=float)[order]
    third = len(ordered) // 3
    first = float(np.median(ordered[:third]))
    last = float(np.median(ordered[-third:]))
    if first <= 0:
        return 1.0
    return last / first
