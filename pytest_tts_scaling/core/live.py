"""validate_live: the traffic that tests a deployed plan, what the plan predicts, and the checks.
Pure: plans, records and the fleet's log in; traffic, predictions and verdicts out.

The traffic is one trace, in three phases:

1. steady: 80% of the load the plan sizes the starting fleet for (the surge's starting
   instances at the per-instance rate at C_scale_max). p95 TTFAB must be within the SLO.
2. surge: the plan's surge (simulate.surge_trace): from the scale-out threshold's rate, rising
   by the surge ratio over one T_total, held two T_total. The first new instance must serve
   within 1.5·T_total of the surge's start; the shed fraction and the worst p95 must stay within
   what the plan's simulation of this very trace predicts.
3. cool: the trough rate, long enough for two scale-ins, which must each wait out the cooldowns.

Rejections (503/429/408) anywhere are allowed only where the instance already held Q_max.

`time_scale` k divides every duration of the policy and of the trace, so a local rehearsal runs
the plan's whole story in minutes: 10 s alarm periods become 10/k s, a 300 s cooldown 300/k s.
Service times are not scaled, so k must leave a period well above a request's duration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pytest_tts_scaling.core.autoscaler import Policy
from pytest_tts_scaling.core.curve import ServiceCurve
from pytest_tts_scaling.core.simulate import simulate, surge_trace

STEADY_SHARE = 0.8
# Requests of the first periods of a phase meet a fleet still settling from the one before.
SETTLE_PERIODS = 2
# Stochastic runs of the plan's simulator averaged for the prediction.
PREDICTION_SEEDS = 8
# What the measurement may exceed the prediction by: the simulator is a Markov model of the
# measured curve, not the server, and on a busy 2-core host the load, the router and the
# instances share the cores, which adds tens of ms to some TTFABs.
SHED_TOLERANCE = 0.03
P95_TOLERANCE = 0.25
P95_TOLERANCE_MS = 50.0
# The surge's p95 is taken over this many consecutive admitted requests at a time.
WINDOW_REQUESTS = 100
FIRST_SERVE_FACTOR = 1.5


def scaled(policy: Policy, time_scale: float) -> Policy:
    """The policy with every duration divided by `time_scale` (1: the plan as deployed)."""
    k = float(time_scale)
    return replace(
        policy,
        period_s=policy.period_s / k,
        scale_out_cooldown_s=policy.scale_out_cooldown_s / k,
        scale_in_cooldown_s=policy.scale_in_cooldown_s / k,
        provision_s=policy.provision_s / k,
    )


@dataclass(frozen=True)
class LiveTraffic:
    """The trace (rate per step of `dt_s`, seconds from the load's start) and its phases."""

    dt_s: float
    rates: NDArray[np.float64]
    steady: tuple[float, float]
    surge: tuple[float, float]
    cool: tuple[float, float]
    policy: Policy
    t_total_s: float
    initial_instances: int
    steady_rps: float
    base_rps: float
    surge_ratio: float
    time_scale: float

    @property
    def duration_s(self) -> float:
        return float(self.rates.size) * self.dt_s


def live_traffic(
    *,
    policy: Policy,
    per_instance_rps: float,
    base_rps: float,
    surge_ratio: float,
    t_total_s: float,
    initial_instances: int,
    trough_rps: float,
    time_scale: float = 1.0,
    steady_periods: int = 12,
    lead_periods: int = 3,
) -> LiveTraffic:
    """The validate_live trace for a plan; all durations divided by `time_scale`."""
    p = scaled(policy, time_scale)
    t_total = t_total_s / time_scale
    dt = p.period_s / 4
    steady_rps = STEADY_SHARE * per_instance_rps * initial_instances
    steady_s = steady_periods * p.period_s
    surge = surge_trace(
        base_rps,
        surge_ratio,
        lead_s=lead_periods * p.period_s,
        ramp_s=t_total,
        hold_s=2 * t_total,
        dt_s=dt,
    )
    # Two scale-ins: detection, then the scale-in cooldown, then detection again, with room.
    cool_s = 2 * p.scale_in_cooldown_s + 2 * (p.scale_in_periods + 2) * p.period_s
    rates = np.concatenate(
        [
            np.full(round(steady_s / dt), steady_rps),
            surge,
            np.full(round(cool_s / dt), max(trough_rps, 0.0)),
        ]
    )
    surge_start = steady_s + lead_periods * p.period_s
    surge_end = steady_s + surge.size * dt
    return LiveTraffic(
        dt_s=dt,
        rates=np.asarray(rates, dtype=float),
        steady=(0.0, steady_s),
        surge=(surge_start, surge_end),
        cool=(surge_end, surge_end + cool_s),
        policy=p,
        t_total_s=t_total,
        initial_instances=initial_instances,
        steady_rps=steady_rps,
        base_rps=base_rps,
        surge_ratio=surge_ratio,
        time_scale=float(time_scale),
    )


@dataclass(frozen=True)
class Prediction:
    shed_fraction: float
    worst_p95_ms: float
    first_capacity_s: float | None


def predict(traffic: LiveTraffic, curve: ServiceCurve, slo_ms: float) -> Prediction:
    """The plan's simulator over this trace (Poisson arrivals, event by event), averaged over
    seeds: the shed fraction and worst p95 TTFAB of the surge, and when new capacity served."""
    start, end = traffic.surge
    sheds, worst, firsts = [], [], []
    for seed in range(PREDICTION_SEEDS):
        run = simulate(
            traffic.rates,
            curve=curve,
            policy=traffic.policy,
            slo_ms=slo_ms,
            dt_s=traffic.dt_s,
            initial_instances=traffic.initial_instances,
            mode="stochastic",
            seed=seed,
        )
        sheds.append(run.shed_fraction(start, end))
        window = (run.time_s >= start) & (run.time_s < end) & ((run.arrived - run.shed) > 0)
        worst.append(float(run.ttfab_p95_ms[window].max()) if window.any() else 0.0)
        outs = [e.ready_at_s - start for e in run.events if e.direction == "out"]
        firsts.append(min(outs) if outs else math.nan)
    known = [f for f in firsts if math.isfinite(f)]
    return Prediction(
        shed_fraction=float(np.mean(sheds)),
        worst_p95_ms=float(np.mean(worst)),
        first_capacity_s=float(np.mean(known)) if known else None,
    )


@dataclass(frozen=True)
class Dispatch:
    """One request a fleet's router sent: where, how busy that instance was, how it ended."""

    at_ns: int
    target: str
    in_flight_before: float
    status: str


@dataclass(frozen=True)
class FleetEvent:
    """`out` (a scale-out decision), `ready`, `first_served`, `in` (scale-in), `stopped`."""

    at_ns: int
    kind: str
    target: str | None
    serving: int
    metric: float | None = None


@dataclass
class FleetLog:
    """What a fleet did during a run, as the local fleet logs it and as `aws/checks/live.py` reads a
    deployed one back: one record for the checks below, whichever fleet it was."""

    initial: list[str] = field(default_factory=list)
    events: list[FleetEvent] = field(default_factory=list)
    dispatches: list[Dispatch] = field(default_factory=list)

    def of(self, kind: str) -> list[FleetEvent]:
        return [e for e in self.events if e.kind == kind]


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str

    def __bool__(self) -> bool:
        return self.ok


Row = dict[str, Any]


def _since(rows: Sequence[Row], t0_ns: int, window: tuple[float, float]) -> list[Row]:
    lo, hi = (t0_ns + int(s * 1e9) for s in window)
    return [r for r in rows if lo <= int(r["epoch_start_ns"]) < hi]


def goodput_p95(rows: Sequence[Row]) -> float:
    """p95 TTFAB where a request that did not end in audio counts as infinitely late."""
    values = [
        float(r["ttfab_ms"]) if r["status"] == "ok" and r["ttfab_ms"] is not None else math.inf
        for r in rows
    ]
    return float(np.percentile(values, 95, method="higher")) if values else math.nan


def check_steady_p95(rows: Sequence[Row], t0_ns: int, traffic: LiveTraffic, slo_ms: float) -> Check:
    lo, hi = traffic.steady
    window = _since(rows, t0_ns, (lo + SETTLE_PERIODS * traffic.policy.period_s, hi))
    p95 = goodput_p95(window)
    detail = (
        f"p95 TTFAB {p95:.1f} ms over {len(window)} requests at {traffic.steady_rps:.1f} rps "
        f"({STEADY_SHARE:.0%} of the planned load of {traffic.initial_instances} instances); "
        f"SLO {slo_ms:g} ms"
    )
    return Check(len(window) > 0 and p95 <= slo_ms, detail)


def check_rejections(dispatches: Sequence[Any], q_max: int) -> Check:
    """Each rejected dispatch found its instance already holding Q_max requests. An in-flight
    count that is NaN was not read (a deployed endpoint's metric had no datapoint then): such a
    rejection is not shown to be fine, so it fails too."""
    rejected = [d for d in dispatches if d.status == "rejected"]
    below = [d for d in rejected if d.in_flight_before < q_max]
    unread = [d for d in rejected if math.isnan(d.in_flight_before)]
    detail = (
        f"{len(rejected)} of {len(dispatches)} requests rejected; "
        f"{len(below)} of them by an instance holding fewer than Q_max {q_max}"
    )
    if below:
        least = min(d.in_flight_before for d in below)
        detail += f" (as few as {least:g})"
    if unread:
        detail += f"; {len(unread)} with no in-flight reading at their time"
    return Check(not below and not unread, detail)


def check_first_new_instance(events: Sequence[Any], t0_ns: int, traffic: LiveTraffic) -> Check:
    bound = FIRST_SERVE_FACTOR * traffic.t_total_s
    start_ns = t0_ns + int(traffic.surge[0] * 1e9)
    served = sorted(e.at_ns for e in events if e.kind == "first_served" and e.at_ns >= start_ns)
    if not served:
        return Check(False, f"no new instance served within the run (bound {bound:.1f} s)")
    took = (served[0] - start_ns) / 1e9
    return Check(
        took <= bound,
        f"the first new instance served {took:.1f} s after the surge began; bound "
        f"{FIRST_SERVE_FACTOR:g} x T_total = {bound:.1f} s",
    )


def first_capacity_line(predicted: Prediction) -> str:
    """What the plan's simulation expected of the same surge, for the report."""
    if predicted.first_capacity_s is None:
        return "the plan's simulation scaled out no instance in this surge"
    return (
        f"the plan's simulation had new capacity serving {predicted.first_capacity_s:.1f} s "
        "after the surge began"
    )


def check_surge_shed(
    rows: Sequence[Row], t0_ns: int, traffic: LiveTraffic, predicted: Prediction
) -> Check:
    window = _since(rows, t0_ns, traffic.surge)
    shed = sum(1 for r in window if r["status"] == "rejected") / len(window) if window else 1.0
    bound = predicted.shed_fraction + SHED_TOLERANCE
    return Check(
        shed <= bound,
        f"shed {shed:.2%} of {len(window)} requests over the surge; the plan's simulation "
        f"predicted {predicted.shed_fraction:.2%} (allowed up to {bound:.2%})",
    )


def check_surge_p95(
    rows: Sequence[Row], t0_ns: int, traffic: LiveTraffic, predicted: Prediction
) -> Check:
    """The worst p95 TTFAB of admitted requests over any `WINDOW_REQUESTS` consecutive ones of
    the surge: fewer would make a p95 the maximum of a handful, which one stall decides."""
    start, _ = traffic.surge
    admitted = sorted(
        (r for r in _since(rows, t0_ns, traffic.surge) if r["status"] != "rejected"),
        key=lambda r: int(r["epoch_start_ns"]),
    )
    worst, where = 0.0, 0.0
    for first in range(0, max(0, len(admitted) - WINDOW_REQUESTS) + 1, WINDOW_REQUESTS):
        window = admitted[first : first + WINDOW_REQUESTS]
        p95 = goodput_p95(window) if len(window) == WINDOW_REQUESTS else 0.0
        if p95 > worst:
            worst, where = p95, (int(window[0]["epoch_start_ns"]) - t0_ns) / 1e9 - start
    bound = predicted.worst_p95_ms * (1 + P95_TOLERANCE) + P95_TOLERANCE_MS
    return Check(
        len(admitted) >= WINDOW_REQUESTS and worst <= bound,
        f"worst p95 TTFAB over {WINDOW_REQUESTS} admitted requests of the surge {worst:.1f} ms "
        f"({where:.1f} s in, of {len(admitted)}); the plan's simulation predicted "
        f"{predicted.worst_p95_ms:.1f} ms (allowed up to {bound:.1f} ms)",
    )


def check_scale_in(events: Sequence[Any], traffic: LiveTraffic) -> Check:
    """Every scale-in waited out the scale-in cooldown since the last one and the scale-out
    cooldown since the last scale-out; at least one happened, so the rule was exercised."""
    p = traffic.policy
    slack_ns = int(1e9 * p.period_s / 10)  # decisions land on period ends, sampled
    ins = [e.at_ns for e in events if e.kind == "in"]
    outs = [e.at_ns for e in events if e.kind == "out"]
    if not ins:
        return Check(False, "no scale-in happened in the cool phase: the cooldown was not tested")
    early: list[str] = []
    for i, at in enumerate(ins):
        if i and at - ins[i - 1] < p.scale_in_cooldown_s * 1e9 - slack_ns:
            early.append(f"{(at - ins[i - 1]) / 1e9:.1f} s after the previous scale-in")
        last_out = max((o for o in outs if o <= at), default=None)
        if last_out is not None and at - last_out < p.scale_out_cooldown_s * 1e9 - slack_ns:
            early.append(f"{(at - last_out) / 1e9:.1f} s after a scale-out")
    gaps = ", ".join(f"{(b - a) / 1e9:.1f} s" for a, b in pairwise(ins)) or "none"
    detail = (
        f"{len(ins)} scale-in(s), gaps between them: {gaps}; cooldowns "
        f"{p.scale_in_cooldown_s:g} s (in), {p.scale_out_cooldown_s:g} s (out)"
    )
    if early:
        detail += "; too early: " + "; ".join(early)
    return Check(not early, detail)
