from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_tts_scaling.core.stats import (
    autocorrelation_time,
    quantile_ci,
    summarize,
    time_weighted_in_flight,
    trend,
    underrun_s,
)


def test_summarize_matches_numpy() -> None:
    values = [float(v) for v in range(1, 101)]
    s = summarize(values)
    assert s.count == 100
    assert s.mean == pytest.approx(50.5)
    assert s.min == 1.0
    assert s.max == 100.0
    assert s.std == pytest.approx(float(np.std(values, ddof=1)))
    assert s.p50 == pytest.approx(50.5)
    assert s.p95 == pytest.approx(float(np.percentile(values, 95)))
    assert s.p99 == pytest.approx(float(np.percentile(values, 99)))


def test_summarize_empty_and_single() -> None:
    assert summarize([]).count == 0
    assert summarize([]).p95 is None
    one = summarize([7.0])
    assert (one.count, one.mean, one.std, one.p99) == (1, 7.0, 0.0, 7.0)


def test_quantile_ci_brackets_the_sample_quantile_and_narrows() -> None:
    rng = np.random.default_rng(1)
    small = rng.exponential(100, 50)
    large = rng.exponential(100, 5000)
    ci_small, ci_large = quantile_ci(small), quantile_ci(large)
    assert ci_small is not None
    assert ci_large is not None
    assert ci_small.low <= np.percentile(small, 95) <= ci_small.high
    assert ci_large.high - ci_large.low < ci_small.high - ci_small.low
    assert quantile_ci([1.0]) is None


def test_quantile_ci_covers_true_p95_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(7)
    true_p95 = -100 * math.log(0.05)  # exponential with mean 100
    hits = 0
    trials = 400
    for _ in range(trials):
        ci = quantile_ci(rng.exponential(100, 200))
        assert ci is not None
        hits += ci.low <= true_p95 <= ci.high
    assert 0.90 <= hits / trials <= 0.995


def test_time_weighted_in_flight() -> None:
    # Two requests over a 10 s window: one for the whole window, one for its second half.
    mean, peak = time_weighted_in_flight([(0, 20), (5, math.inf)], 0, 10)
    assert mean == pytest.approx(1.5)
    assert peak == 2
    # Intervals outside the window do not count.
    assert time_weighted_in_flight([(-5, -1), (11, 12)], 0, 10) == (0.0, 0.0)


def test_underrun_counts_only_stalls_after_playback_started() -> None:
    # 1 s of audio at t=0, next second arrives at t=1.5: the player waits 0.5 s.
    assert underrun_s(0.0, [(0.0, 1.0), (1.5, 1.0)]) == pytest.approx(0.5)
    # Chunks arriving faster than real time never stall.
    assert underrun_s(0.0, [(0.0, 1.0), (0.2, 1.0), (0.4, 1.0)]) == 0.0
    assert underrun_s(2.0, [(2.0, 0.5)]) == 0.0


def test_trend_sees_a_rising_queue_and_not_a_steady_mix_of_waves() -> None:
    times = list(range(60))
    change, noise = trend(times, [100.0 + 20 * t for t in times])
    assert change == pytest.approx(20 * 59 * 5 / 6, rel=0.05)
    assert noise == pytest.approx(0.0, abs=1e-6)
    # A 4-slot server's TTFAB: waves of 50 ms and 150 ms in a fixed pattern, no trend.
    waves = [50.0 if t % 4 else 150.0 for t in times]
    change, noise = trend(times, waves)
    assert abs(change) < 30
    assert trend(times[:10], waves[:10]) == (0.0, math.inf)


def test_autocorrelation_time() -> None:
    rng = np.random.default_rng(5)
    assert autocorrelation_time(rng.normal(size=400)) == pytest.approx(1.0, abs=0.6)
    # Each value repeated 8 times: about 8 samples per independent one.
    assert autocorrelation_time(np.repeat(rng.normal(size=50), 8)) > 4
    # A steady two-level sequence is not correlated in rank (ties share their rank).
    assert autocorrelation_time([1.0, 2.0] * 50) == pytest.approx(1.0, abs=0.2)
    assert autocorrelation_time([3.0] * 20) == 1.0


def test_quantile_ci_is_open_above_when_the_maximum_cannot_bound_it() -> None:
    small = quantile_ci([float(v) for v in range(20)])
    assert small is not None
    assert not small.bounded_above
    assert small.high == 19.0
    large = quantile_ci(np.random.default_rng(2).exponential(100, 2000))
    assert large is not None
    assert large.bounded_above
