"""The p95 interval keeps its promise on correlated closed-loop data.

Consecutive requests of a closed loop are correlated: a slow moment slows every request in
flight. The simulated sequence is a lognormal AR(1) (lag-one correlation of the log 0.6), a
shape TTFAB takes on a loaded server, whose true p95 is known in closed form.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_tts_scaling.core.stats import quantile_ci

PHI = 0.6
SIGMA = 0.5
TRUE_P95 = math.exp(SIGMA * 1.6448536269514722)
TRIALS = 400


def autocorrelated(n: int, rng: np.random.Generator) -> np.ndarray:
    shocks = rng.standard_normal(n) * math.sqrt(1 - PHI**2)
    z = np.empty(n)
    z[0] = rng.standard_normal()
    for i in range(1, n):
        z[i] = PHI * z[i - 1] + shocks[i]
    return np.exp(SIGMA * z)


def coverage(n: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(TRIALS):
        ci = quantile_ci(autocorrelated(n, rng))
        assert ci is not None
        hits += ci.low <= TRUE_P95 and (not ci.bounded_above or ci.high >= TRUE_P95)
    return hits / TRIALS


@pytest.mark.parametrize("n", [20, 40, 100, 400])
def test_p95_interval_covers_at_least_90_percent_at_nominal_95(n: int) -> None:
    assert coverage(n, seed=n) >= 0.90


def test_the_sequence_is_correlated_enough_to_break_the_binomial_interval() -> None:
    """The independent-sample interval (order statistics, binomial ranks) covers far less here,
    so the test above is one an interval that ignores correlation fails."""
    rng = np.random.default_rng(11)
    z = 1.959963984540054
    n, q, hits = 40, 0.95, 0
    for _ in range(TRIALS):
        data = np.sort(autocorrelated(n, rng))
        spread = z * math.sqrt(n * q * (1 - q))
        low = data[max(0, math.floor(n * q - spread) - 1)]
        high = data[min(n - 1, math.ceil(n * q + spread))]
        hits += low <= TRUE_P95 <= high
    assert hits / TRIALS < 0.85
