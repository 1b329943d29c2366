"""The adaptive search against known curves, with a fake measurement: pure and instant.

Each curve gives p95 TTFAB, throughput and mean latency at N for a server of known shape; the
search must end on the exact Q_max, bracketed by N+1, in at most a third of the rungs of a
fixed ladder of every integer up to Q_max + 1 wherever Q_max >= 10.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from pytest_tts_scaling.calibration.disciplines import Batching
from pytest_tts_scaling.calibration.truth import simulate_ttfab_s
from pytest_tts_scaling.core.schema import Interval, Rung
from pytest_tts_scaling.core.search import (
    add_measurement,
    next_step,
    rungs_left,
    wave_prediction,
    worst_case_rungs,
)
from pytest_tts_scaling.core.stats import summarize
from pytest_tts_scaling.core.verdicts import select_qmax
from tests.factories import make_rung

Curve = Callable[[int], tuple[float, float, float]]  # N -> (p95 ms, throughput rps, latency ms)


def serial(service_ms: float, first_ms: float) -> Curve:
    return lambda n: (first_ms + (n - 1) * service_ms, 1000 / service_ms, n * service_ms)


def slots(k: int, service_ms: float, first_ms: float) -> Curve:
    def curve(n: int) -> tuple[float, float, float]:
        rps = min(n, k) / service_ms * 1000
        return first_ms + (math.ceil(n / k) - 1) * service_ms, rps, n / rps * 1000

    return curve


def batching(fixed_ms: float, per_request_ms: float) -> Curve:
    """All N in one batch: TTFAB = fixed + per_request·N; throughput grows with N."""

    def curve(n: int) -> tuple[float, float, float]:
        latency = fixed_ms + per_request_ms * n
        return latency, n / latency * 1000, latency

    return curve


def measured(n: int, curve: Curve, slo_ms: float) -> Rung:
    p95, rps, latency = curve(n)
    passes = p95 <= slo_ms
    return make_rung(
        n,
        meets_slo=passes,
        ttfab_p95_ms=p95,
        completed=100,
        measure_s=10,
        throughput_rps=rps,
        latency_ms=summarize([latency]),
        ttfab_p95_ci_ms=Interval(low=p95 * 0.98, high=p95 * 1.02),
        goodput_ttfab_p95_ms=p95,
        fail_reason=None if passes else "slo",
    )


def search(measure: Callable[[int], Rung], slo_ms: float, top: int = 256) -> list[Rung]:
    rungs: list[Rung] = []
    while (step := next_step(rungs, slo_ms, ladder=None, max_concurrency=top)) is not None:
        rungs = add_measurement(rungs, measure(step.concurrency))
        assert len(rungs) <= worst_case_rungs(top)
    return rungs


def truth(curve: Curve, slo_ms: float) -> int:
    return next(n for n in range(1, 10_000) if curve(n)[0] > slo_ms) - 1


CASES = [
    ("serial", serial(100, 50), [1000, 1500, 2345, 4000]),
    ("4 slots", slots(4, 200, 50), [750, 1234, 2000, 3900]),
    ("8 slots", slots(8, 100, 30), [500, 777, 1500]),
    ("batching", batching(100, 40), [600, 1000, 3000]),
    ("batching, cheap per request", batching(100, 5), [200, 450, 1000]),
]


@pytest.mark.parametrize(
    ("curve", "slo_ms"),
    [pytest.param(c, s, id=f"{name}-{s}") for name, c, slos in CASES for s in slos],
)
def test_search_is_exact_bracketed_and_a_third_of_the_integer_ladder(
    curve: Curve, slo_ms: float
) -> None:
    rungs = search(lambda n: measured(n, curve, slo_ms), slo_ms)
    q_max = truth(curve, slo_ms)
    assert q_max >= 10
    assert select_qmax(rungs, slo_ms) == (q_max, True)
    assert {q_max, q_max + 1} <= {r.concurrency for r in rungs}
    # Wall time at the same hold, gap 0: rungs measured against a ladder of 1..Q_max+1.
    assert len(rungs) / (q_max + 1) <= 1 / 3
    assert rungs_left(rungs, slo_ms, ladder=None) == 0


def test_k_slot_server_of_the_issue_is_found_in_four_rungs() -> None:
    """4 slots, S 100 ms, first audio 50 ms, SLO 400 ms: truth K·floor((SLO−first+S)/S) = 16.

    The old ladder measured 9 (source-style) and 5 (every integer) here.
    """
    curve = slots(4, 100, 50)
    rungs = search(lambda n: measured(n, curve, 400), 400)
    assert select_qmax(rungs, 400) == (16, True)
    assert [r.concurrency for r in rungs] == [1, 4, 16, 17]


def test_a_single_noisy_failure_is_retested_and_does_not_cap() -> None:
    curve = serial(100, 50)
    noisy_once = {10}

    def measure(n: int) -> Rung:
        if n in noisy_once:  # a burst of slow requests, once
            noisy_once.discard(n)
            return measured(n, lambda _: (5000.0, 10.0, 1000.0), 1000)
        return measured(n, curve, 1000)

    rungs = search(measure, 1000)
    assert select_qmax(rungs, 1000) == (10, True)
    ten = next(r for r in rungs if r.concurrency == 10)
    assert ten.remeasured == 1
    assert ten.earlier == ["fail:slo"]


def test_an_unusable_rung_is_measured_again_and_never_brackets() -> None:
    curve = serial(100, 50)
    unsettled_once = {11}

    def measure(n: int) -> Rung:
        rung = measured(n, curve, 1000)
        if n in unsettled_once:
            unsettled_once.discard(n)
            return rung.model_copy(
                update={"usable": False, "unusable_reason": "not_settled", "meets_slo": False}
            )
        return rung

    rungs = search(measure, 1000)
    assert select_qmax(rungs, 1000) == (10, True)
    eleven = next(r for r in rungs if r.concurrency == 11)
    assert eleven.usable
    assert eleven.earlier == ["unusable:not_settled"]


@pytest.mark.parametrize("times", [1, 2])
def test_a_rung_where_nothing_completed_is_measured_once_more(times: int) -> None:
    """A server that sends each answer whole after seconds is slow, not stopped: its N=1 once
    unusable (nothing completed) is measured again; twice so, nothing above it is measured."""
    curve = serial(100, 50)
    left = {1: times}

    def measure(n: int) -> Rung:
        rung = measured(n, curve, 1000)
        if left.get(n):
            left[n] -= 1
            return rung.model_copy(
                update={"usable": False, "unusable_reason": "nothing_completed", "meets_slo": False}
            )
        return rung

    rungs = search(measure, 1000)
    one = next(r for r in rungs if r.concurrency == 1)
    assert one.earlier == ["unusable:nothing_completed"]
    if times == 1:
        assert one.usable
        assert select_qmax(rungs, 1000) == (10, True)
    else:
        assert [r.concurrency for r in rungs] == [1]
        assert select_qmax(rungs, 1000) == (None, False)


def test_nothing_passes_is_no_qmax_and_not_bracketed() -> None:
    rungs = search(lambda n: measured(n, serial(100, 50), 10), 10)
    assert [r.concurrency for r in rungs] == [1]
    assert select_qmax(rungs, 10) == (None, False)


def test_the_search_stops_at_its_top_with_a_lower_bound() -> None:
    rungs = search(lambda n: measured(n, slots(64, 50, 10), 3000), 3000, top=8)
    assert max(r.concurrency for r in rungs) == 8
    assert select_qmax(rungs, 3000) == (8, False)


def test_a_gate_limited_rung_caps_the_search_below_it() -> None:
    curve = serial(100, 50)

    def measure(n: int) -> Rung:
        rung = measured(n, curve, 3000)
        if n > 7:
            return rung.model_copy(
                update={"usable": False, "unusable_reason": "gate_limited", "meets_slo": False}
            )
        return rung

    rungs = search(measure, 3000)
    assert select_qmax(rungs, 3000) == (7, False)
    # Predicted 30, gate-limited: bisect down to the gate, never measuring a blocked N twice.
    assert [r.concurrency for r in rungs] == [1, 30, 15, 8, 4, 6, 7]


def simulated(discipline: Batching, n: int, slo_ms: float) -> Rung:
    """A rung of the calibration server's closed loop, simulated: TTFAB summary and throughput."""
    ttfab = simulate_ttfab_s(discipline, n) * 1000.0
    p95 = float(np.percentile(ttfab, 95))
    passes = p95 <= slo_ms
    return make_rung(
        n,
        meets_slo=passes,
        ttfab_p95_ms=p95,
        ttfab_ms=summarize(ttfab.tolist()),
        latency_ms=summarize(ttfab.tolist()),  # a batch member gets all its audio at once
        completed=ttfab.size,
        measure_s=10,
        throughput_rps=n / float(ttfab.mean()) * 1000.0,
        ttfab_p95_ci_ms=Interval(low=p95 * 0.98, high=p95 * 1.02),
        goodput_ttfab_p95_ms=p95,
        fail_reason=None if passes else "slo",
    )


def test_a_full_batch_server_is_read_from_the_waves_of_one_saturated_rung() -> None:
    # Batches of at most 8 in 50 + 10·B ms after a 30 ms window: N=1 and N=4 look like an
    # unbounded batcher, the first failure (far above) shows waves of 160 ms of 8 requests.
    full = Batching(0.05, 0.01, max_batch=8, window_s=0.03)
    rungs = search(lambda n: simulated(full, n, 400.0), 400.0)
    assert select_qmax(rungs, 400.0) == (16, True)
    assert len(rungs) <= 5
    saturated = next(r for r in rungs if r.concurrency > 17)
    assert wave_prediction([saturated], 400.0) == 16


def test_the_waves_slots_come_from_the_latencies_not_a_short_windows_count() -> None:
    # A failure ended early holds about seven waves: its count of completions reads 9% low
    # (7.3 slots, within tolerance of 7: Q_max 14), the mean latency does not (8 slots: 16).
    full = Batching(0.05, 0.01, max_batch=8, window_s=0.03)
    exact = simulated(full, 21, 400.0)
    early = exact.model_copy(
        update={"throughput_rps": exact.throughput_rps * 0.91, "ended_early": True}
    )
    assert wave_prediction([early], 400.0) == 16


def test_waves_are_not_read_from_one_level_or_a_spread() -> None:
    one_level = make_rung(20, meets_slo=False, ttfab_p95_ms=850.0, throughput_rps=20)
    assert wave_prediction([one_level], 750.0) is None
    spread = make_rung(
        11,
        meets_slo=False,
        ttfab_p95_ms=1059.0,
        ttfab_ms=summarize([float(v) for v in range(930, 1070)]),
        throughput_rps=10,
    )
    assert wave_prediction([spread], 1008.0) is None
