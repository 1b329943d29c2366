"""validate_live's traffic, prediction and checks: pure, on made-up records and fleet logs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pytest_tts_scaling.core import live
from pytest_tts_scaling.core.autoscaler import Policy
from pytest_tts_scaling.core.curve import ServiceCurve
from pytest_tts_scaling.core.live import Dispatch, FleetEvent, Prediction

T0 = 1_000_000_000_000
POLICY = Policy(
    target_concurrency=12.0,
    scale_in_concurrency=8.0,
    min_instances=1,
    max_instances=3,
    scale_out_cooldown_s=30.0,
    scale_in_cooldown_s=300.0,
    provision_s=40.0,
    queue_max_depth=16,
)
CURVE = ServiceCurve((1.0, 8.0, 16.0), (2.5, 20.0, 40.0), (52.0, 52.0, 53.0))


def traffic(**overrides: Any) -> live.LiveTraffic:
    args: dict[str, Any] = {
        "policy": POLICY,
        "per_instance_rps": 30.0,
        "base_rps": 54.0,
        "surge_ratio": 1.25,
        "t_total_s": 100.0,
        "initial_instances": 2,
        "trough_rps": 9.0,
        "time_scale": 20.0,
    }
    return live.live_traffic(**{**args, **overrides})


def row(at_s: float, status: str = "ok", ttfab_ms: float | None = 50.0) -> dict[str, Any]:
    return {
        "epoch_start_ns": T0 + int(at_s * 1e9),
        "status": status,
        "ttfab_ms": ttfab_ms if status == "ok" else None,
    }


def event(at_s: float, kind: str) -> FleetEvent:
    return FleetEvent(T0 + int(at_s * 1e9), kind, None, 2)


def test_scaled_divides_every_duration_of_the_policy() -> None:
    p = live.scaled(POLICY, 20.0)
    assert (p.period_s, p.scale_out_cooldown_s, p.scale_in_cooldown_s, p.provision_s) == (
        0.5,
        1.5,
        15.0,
        2.0,
    )
    assert p.target_concurrency == POLICY.target_concurrency


def test_traffic_has_the_three_phases_at_the_planned_rates() -> None:
    t = traffic()
    dt = t.dt_s
    steady = t.rates[: round(t.steady[1] / dt)]
    assert np.all(steady == pytest.approx(0.8 * 30.0 * 2))
    surge = t.rates[round(t.surge[0] / dt) : round(t.surge[1] / dt)]
    assert surge[0] == pytest.approx(54.0, rel=0.05)
    assert surge.max() == pytest.approx(54.0 * 1.25)
    # One T_total (5 s at 1/20) of ramp, two of hold.
    assert t.surge[1] - t.surge[0] == pytest.approx(15.0)
    cool = t.rates[round(t.cool[0] / dt) :]
    assert np.all(cool == 9.0)
    assert t.cool[1] - t.cool[0] >= 2 * t.policy.scale_in_cooldown_s
    assert t.duration_s == pytest.approx(t.cool[1])


def test_prediction_is_seeded_and_sees_the_policy_absorb_the_surge() -> None:
    t = traffic()
    first = live.predict(t, CURVE, 150.0)
    assert live.predict(t, CURVE, 150.0) == first
    frozen = traffic(policy=Policy(**{**POLICY.__dict__, "max_instances": 2}))
    assert live.predict(frozen, CURVE, 150.0).shed_fraction > first.shed_fraction


def test_steady_p95_counts_failures_against_the_slo() -> None:
    t = traffic()
    rows = [row(1.5 + i * 0.01) for i in range(100)]
    assert live.check_steady_p95(rows, T0, t, 150.0)
    slow = [*rows[:90], *(row(2.5 + i * 0.01, ttfab_ms=400.0) for i in range(10))]
    assert not live.check_steady_p95(slow, T0, t, 150.0)
    failed = [*rows[:90], *(row(2.5 + i * 0.01, status="error") for i in range(10))]
    check = live.check_steady_p95(failed, T0, t, 150.0)
    assert not check
    assert "p95 TTFAB inf ms" in check.detail
    # Requests of the first periods (the fleet settling) do not count.
    assert not live.check_steady_p95([row(0.1)], T0, t, 150.0)
    assert math.isnan(live.goodput_p95([]))  # nothing measured


def test_rejections_must_come_from_a_full_instance() -> None:
    full = [Dispatch(T0, "a", 16, "rejected"), Dispatch(T0, "a", 3, "ok")]
    assert live.check_rejections(full, 16)
    early = [*full, Dispatch(T0, "b", 9, "rejected")]
    check = live.check_rejections(early, 16)
    assert not check
    assert "1 of them by an instance holding fewer than Q_max 16 (as few as 9)" in check.detail


def test_first_new_instance_must_serve_within_one_and_a_half_t_total() -> None:
    t = traffic()  # surge starts at 7.5 s; T_total 5 s at 1/20: bound 7.5 s
    assert live.check_first_new_instance([event(13.0, "first_served")], T0, t)
    assert not live.check_first_new_instance([event(16.0, "first_served")], T0, t)
    check = live.check_first_new_instance([], T0, t)
    assert not check
    assert "no new instance served" in check.detail


def test_surge_shed_and_p95_are_held_to_the_prediction() -> None:
    t = traffic()
    start = t.surge[0]
    rows = [row(start + i * 0.01) for i in range(1000)]
    predicted = Prediction(shed_fraction=0.01, worst_p95_ms=55.0, first_capacity_s=2.0)
    assert live.check_surge_shed(rows, T0, t, predicted)
    assert live.check_surge_p95(rows, T0, t, predicted)
    shedding = [row(start + i * 0.01, status="rejected") for i in range(100)] + rows[100:]
    assert not live.check_surge_shed(shedding, T0, t, predicted)
    slow = [row(start + i * 0.01, ttfab_ms=300.0 if i < 40 else 50.0) for i in range(1000)]
    check = live.check_surge_p95(slow, T0, t, predicted)
    assert not check
    assert "300.0 ms" in check.detail
    # A stall that delays 3 requests in a window of 100 is not the surge's p95.
    stalled = [
        row(start + i * 0.01, ttfab_ms=300.0 if i in (5, 6, 7) else 50.0) for i in range(1000)
    ]
    assert live.check_surge_p95(stalled, T0, t, predicted)
    assert not live.check_surge_p95(rows[:50], T0, t, predicted)  # too few to judge


def test_scale_ins_must_wait_out_both_cooldowns() -> None:
    t = traffic()  # cooldowns at 1/20: 15 s in, 1.5 s out
    ok = [event(8.0, "out"), event(24.0, "in"), event(40.0, "in")]
    assert live.check_scale_in(ok, t)
    too_soon = [event(8.0, "out"), event(24.0, "in"), event(30.0, "in")]
    check = live.check_scale_in(too_soon, t)
    assert not check
    assert "6.0 s after the previous scale-in" in check.detail
    after_out = [event(8.0, "out"), event(8.5, "in")]
    assert "0.5 s after a scale-out" in live.check_scale_in(after_out, t).detail
    assert not live.check_scale_in([event(8.0, "out")], t)
