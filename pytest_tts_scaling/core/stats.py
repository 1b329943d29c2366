"""Statistics over per-request metrics (docs/method.md). Pure: numpy in, schema models out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike

from pytest_tts_scaling.core.schema import Interval, Summary

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


def quantile_ci(values: ArrayLike, q: float = 0.95, level: float = 0.95) -> Interval | None:
    """Confidence interval for a quantile of a correlated series, from order statistics.

    `values` must be in the order they were measured. Consecutive requests of a closed loop are
    correlated, so the count of samples below the true q-quantile varies more than the binomial
    n·q·(1 − q) that holds for independent samples: by the factor τ (integrated autocorrelation
    time), estimated here by batch means of the ranks. The interval is the pair of order
    statistics that brackets that count with the given coverage. When the upper rank lies beyond
    the sample and the sample is too small for its maximum to bound the quantile, the interval
    is open above (`bounded_above` false, `high` the largest value seen). None below 2 samples.
    """
    series = np.asarray(values, dtype=float)
    n = int(series.size)
    if n < 2:
        return None
    data = np.sort(series)
    tau = autocorrelation_time(values)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    spread = z * math.sqrt(n * q * (1 - q) * tau)
    low_rank = max(0, math.floor(n * q - spread) - 1)
    high_rank = math.ceil(n * q + spread)
    # The sample maximum bounds the quantile unless all n/τ effective samples could lie below it.
    bounded = high_rank <= n - 1 or q ** (n / tau) <= (1 - level) / 2
    return Interval(
        low=float(data[low_rank]),
        high=float(data[min(high_rank, n - 1)]),
        level=level,
        bounded_above=bounded,
    )


def autocorrelation_time(series: ArrayLike) -> float:
    """How many consecutive samples carry the information of one independent sample (≥ 1).

    Batch means over the ranks (ties share their mean rank, so a steady sequence of a few
    levels is not read as correlated): τ = m · var(means of batches of m) / var(ranks), with
    batches of about √n.
    """
    data = np.asarray(series, dtype=float)
    _, inverse, counts = np.unique(data, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]
    n = int(ranks.size)
    size = max(2, math.isqrt(n))
    batches = n // size
    if batches < 2 or float(ranks.var()) == 0.0:
        return 1.0
    means = ranks[: batches * size].reshape(batches, size).mean(axis=1)
    return max(1.0, size * float(means.var(ddof=1)) / float(ranks.var(ddof=1)))


def time_weighted_in_flight(
    intervals: Sequence[tuple[float, float]], window_start: float, window_end: float
) -> tuple[float, float]:
    """Time-weighted mean and maximum number of open intervals within a window.

    Each interval is (start, end) of one request; requests still open at the window's end pass
    end = inf. This is the client-side in-flight count (docs/method.md).
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


def trend(times: Sequence[float], values: Sequence[float], batches: int = 6) -> tuple[float, float]:
    """How far a metric moved across a window, and the noise of that estimate (same unit).

    The window is cut into `batches` consecutive batches in time order; the change is the
    least-squares slope of the batch means times the window's span in batches, the noise its
    standard error. Batch means of a stationary sequence (a steady mix of waves, say) stay put
    whatever its shape; a queue that keeps growing moves them. Fewer than 3 samples a batch
    cannot show a trend and return (0, inf).
    """
    if len(values) < 3 * batches:
        return 0.0, math.inf
    order = np.argsort(np.asarray(times, dtype=float), kind="stable")
    ordered = np.asarray(values, dtype=float)[order]
    means = np.array([part.mean() for part in np.array_split(ordered, batches)])
    index = np.arange(batches, dtype=float)
    slope, intercept = np.polyfit(index, means, 1)
    residuals = means - (slope * index + intercept)
    spread = float(np.sqrt((residuals**2).sum() / (batches - 2)))
    slope_se = spread / math.sqrt(float(((index - index.mean()) ** 2).sum()))
    return float(slope) * (batches - 1), slope_se * (batches - 1)
