"""The fleet simulator against closed forms: Erlang C, fluid growth, the policy's timing."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_tts_scaling.core.autoscaler import Policy
from pytest_tts_scaling.core.curve import ServiceCurve
from pytest_tts_scaling.core.simulate import diurnal_trace, simulate, surge_trace

# An instance that serves one request at a time at rate MU: X(c) = MU * min(c, 1).
MU = 1.0
SERIAL = ServiceCurve(concurrency=(1.0,), throughput_rps=(MU,), ttfab_p95_ms=(1000.0 / MU,))
# The worked example's ladder: throughput grows to a knee at 10 and flattens.
EXAMPLE = ServiceCurve(
    concurrency=(1, 5, 10, 20, 30, 40, 50, 60),
    throughput_rps=(16.31, 19.0, 19.8, 20.0, 20.1, 20.15, 20.2, 19.9),
    ttfab_p95_ms=(65, 300, 575, 1140, 1700, 2260, 2830, 3410),
)


def fixed(n: int, queue_max_depth: int | None = None) -> Policy:
    """n instances that never scale."""
    return Policy(
        target_concurrency=1e9,
        scale_in_concurrency=0.0,
        min_instances=n,
        max_instances=n,
        queue_max_depth=queue_max_depth,
    )


def erlang_c_wait(servers: int, arrival: float, service: float) -> float:
    """Mean wait in queue of an M/M/c queue (Erlang C)."""
    a = arrival / service
    blocking = 1.0  # Erlang B by its recursion, stable for large fleets
    for k in range(1, servers + 1):
        blocking = a * blocking / (k + a * blocking)
    waiting = servers * blocking / (servers - a * (1 - blocking))
    return waiting / (servers * service - arrival)


@pytest.mark.parametrize(("servers", "arrival"), [(1, 0.5), (4, 3.0), (10, 8.0)])
def test_stochastic_mode_is_an_mmc_queue(servers: int, arrival: float) -> None:
    # Single-server instances under least-outstanding routing pooled: the birth-death chain of
    # M/M/servers. Mean time in system from Little's law, minus the service time, is the wait.
    run = simulate(
        np.full(4000, arrival),
        curve=SERIAL,
        policy=fixed(servers),
        slo_ms=1e9,
        dt_s=10.0,
        mode="stochastic",
        seed=7,
    )
    admitted = float((run.arrived - run.shed).sum()) / (run.time_s.size * run.dt_s)
    assert admitted == pytest.approx(arrival, rel=0.02)
    wait = run.mean_in_flight / admitted - 1 / MU
    expected = erlang_c_wait(servers, arrival, MU)
    assert wait == pytest.approx(expected, rel=0.10), (wait, expected)


def test_fluid_mode_is_the_many_instance_limit_of_the_queue() -> None:
    # At fixed load 0.8, Erlang C's wait vanishes as the fleet grows; the fluid model has none.
    waits = [erlang_c_wait(n, 0.8 * n, MU) for n in (10, 100, 400)]
    assert waits[0] > waits[1] > waits[2]
    assert waits[2] < 1e-6
    run = simulate(np.full(600, 320.0), curve=SERIAL, policy=fixed(400), slo_ms=1e9)
    assert run.mean_in_flight / 320.0 - 1 / MU == pytest.approx(0.0, abs=1e-9)
    stochastic = simulate(
        np.full(100, 320.0), curve=SERIAL, policy=fixed(400), slo_ms=1e9, mode="stochastic"
    )
    admitted = float((stochastic.arrived - stochastic.shed).sum()) / 100.0
    assert stochastic.mean_in_flight / admitted - 1 / MU == pytest.approx(0.0, abs=0.02)


def test_backlog_grows_at_arrivals_minus_capacity() -> None:
    # 4 serial instances complete 4/s; 10/s arrive; with no bound the backlog grows 6/s.
    run = simulate(
        np.full(120, 10.0), curve=SERIAL, policy=fixed(4), slo_ms=1e9, initial_in_flight=50.0
    )
    growth = np.diff(run.in_flight)
    assert growth == pytest.approx(np.full(119, 6.0))
    assert run.completed == pytest.approx(np.full(120, 4.0))
    assert run.total_shed == 0.0


def test_the_admission_bound_sheds_the_excess() -> None:
    # The same fleet with QUEUE_MAX_DEPTH 5: the backlog stops at 20 and 6/s are refused.
    run = simulate(np.full(60, 10.0), curve=SERIAL, policy=fixed(4, queue_max_depth=5), slo_ms=1e9)
    assert run.in_flight.max() == pytest.approx(20.0)
    assert run.shed[-30:] == pytest.approx(np.full(30, 6.0))
    assert run.shed_fraction(30, None) == pytest.approx(0.6)


def test_fluid_steady_state_below_capacity() -> None:
    # 15 rps on one example instance: the curve gives 15 completions/s below concurrency 1.
    run = simulate(np.full(100, 15.0), curve=EXAMPLE, policy=fixed(1), slo_ms=3000)
    assert run.in_flight[-1] == pytest.approx(15.0 / 16.31)
    assert run.ttfab_p95_ms[-1] == pytest.approx(65.0)
    assert run.total_shed == 0.0


def test_requests_are_conserved() -> None:
    rates = surge_trace(4000, 1.25, lead_s=60, ramp_s=320, hold_s=640)
    policy = Policy(37.5, 25.0, 1, 249, 30, 960, 260.2, 50)
    run = simulate(rates, curve=EXAMPLE, policy=policy, slo_ms=3000, initial_instances=199)
    admitted = run.arrived - run.shed
    start = 199 * EXAMPLE.concurrency_for(4000 / 199, 50)  # type: ignore[operator]
    assert run.in_flight[-1] == pytest.approx(start + admitted.sum() - run.completed.sum())
    assert (run.shed >= -1e-9).all()
    assert (run.shed <= run.arrived + 1e-9).all()


def test_scale_out_waits_for_the_alarm_and_the_provisioning() -> None:
    # 2 instances at target 10 (they are saturated at 1 each, so the metric jumps);
    # 3 periods of 10 s above the target, then provision 100 s.
    policy = Policy(
        target_concurrency=10.0,
        scale_in_concurrency=0.0,
        min_instances=2,
        max_instances=20,
        scale_out_cooldown_s=30,
        provision_s=100.0,
        queue_max_depth=20,
    )
    run = simulate(np.full(400, 2.5), curve=SERIAL, policy=policy, slo_ms=1e9)
    first = run.events[0]
    # Saturated from the third second, the backlog grows 0.5/s and passes 10 per instance
    # (20 in all) in second 38: the periods ending at 40, 50 and 60 s are above the target.
    assert run.in_flight[37] < 20 < run.in_flight[38]
    assert first.direction == "out"
    assert first.at_s == pytest.approx(60.0)
    assert first.ready_at_s == pytest.approx(160.0)
    assert first.instances == math.ceil(2 * first.metric / 10.0) - 2
    assert run.serving[159] == 2
    assert run.serving[160] == 2 + first.instances
    later = [e for e in run.events[1:] if e.direction == "out"]
    assert all(e.at_s >= first.at_s + 30 for e in later)


def test_scale_in_one_at_a_time_after_cooldown_down_to_the_floor() -> None:
    policy = Policy(
        target_concurrency=0.9,
        scale_in_concurrency=0.5,
        min_instances=2,
        max_instances=10,
        scale_in_cooldown_s=300,
    )
    run = simulate(np.full(3000, 1.0), curve=SERIAL, policy=policy, slo_ms=1e9, initial_instances=6)
    ins = [e for e in run.events if e.direction == "in"]
    assert [e.instances for e in ins] == [1] * 4
    assert all(b.at_s - a.at_s >= 300 for a, b in itertools.pairwise(ins))
    assert ins[0].at_s == pytest.approx(30.0)
    assert run.serving[-1] == 2


def test_service_curve_interpolates_and_extrapolates_conservatively() -> None:
    assert EXAMPLE.throughput(0.5) == pytest.approx(16.31 / 2)
    assert EXAMPLE.throughput(37.5) == pytest.approx(20.1375)
    assert EXAMPLE.throughput(200) == pytest.approx(19.9)  # held at the top rung, not the max
    # Beyond the top rung p95 TTFAB grows by max(last slope 58 ms, 1000/19.9 = 50.3 ms).
    assert EXAMPLE.ttfab_p95(70) == pytest.approx(3410 + 10 * 58.0)
    sustained = EXAMPLE.sustained(50)
    xs = np.linspace(0, 80, 161)
    ys = [sustained(x) for x in xs]
    assert all(b >= a for a, b in itertools.pairwise(ys))
    assert all(sustained(x) <= EXAMPLE.throughput(x) + 1e-12 for x in xs if x <= 50)
    assert EXAMPLE.concurrency_for(30.0, 50) is None
    assert EXAMPLE.concurrency_for(20.1, 50) == pytest.approx(30.0)


@settings(max_examples=30, deadline=None)
@given(
    rate=st.floats(0.0, 60.0),
    n=st.integers(1, 4),
    depth=st.integers(1, 60),
    dt=st.sampled_from([0.5, 1.0, 2.0, 10.0]),
)
def test_fluid_never_overfills_or_goes_negative(rate: float, n: int, depth: int, dt: float) -> None:
    run = simulate(
        np.full(int(100 / dt), rate),
        curve=EXAMPLE,
        policy=fixed(n, queue_max_depth=depth),
        slo_ms=3000,
        dt_s=dt,
        initial_in_flight=0.0,
    )
    assert (run.in_flight >= -1e-9).all()
    assert (run.in_flight <= n * depth + 1e-6).all()
    assert (run.completed >= -1e-9).all()


def test_stochastic_runs_repeat_with_the_seed() -> None:
    kwargs = {"curve": SERIAL, "policy": fixed(2), "slo_ms": 1e9, "mode": "stochastic"}
    a = simulate(np.full(50, 1.5), seed=3, **kwargs)  # type: ignore[arg-type]
    b = simulate(np.full(50, 1.5), seed=3, **kwargs)  # type: ignore[arg-type]
    c = simulate(np.full(50, 1.5), seed=4, **kwargs)  # type: ignore[arg-type]
    assert np.array_equal(a.in_flight, b.in_flight)
    assert not np.array_equal(a.in_flight, c.in_flight)


@pytest.mark.timeout(120)
def test_a_day_at_5000_rps_is_simulated_whole() -> None:
    """A day of seconds at 5000 rps: the whole trace, bounded by the test's timeout (a hang
    guard far above the second or two it takes), never by an elapsed-time assertion."""
    policy = Policy(37.5, 25.0, 1, 249, 30, 960, 260.2, 50)
    rates = diurnal_trace(5000, 10)
    run = simulate(rates, curve=EXAMPLE, policy=policy, slo_ms=3000)
    assert run.time_s.size == 86400
    assert run.total_arrived == pytest.approx(rates.sum())
    assert 200 < run.serving.max() <= 249
    assert run.instance_hours > 0


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number"):
        simulate([1.0], curve=SERIAL, policy=fixed(1), slo_ms=1, dt_s=3.0)
    with pytest.raises(ValueError, match=">= 0"):
        simulate([-1.0], curve=SERIAL, policy=fixed(1), slo_ms=1)
    with pytest.raises(ValueError, match="min_instances"):
        Policy(10, 5, min_instances=3, max_instances=2)
    with pytest.raises(ValueError, match="increasing"):
        ServiceCurve((2.0, 1.0), (1.0, 1.0), (1.0, 1.0))
