"""A fleet under a traffic trace and an autoscaling policy. Pure: numbers in, numbers out.

The model
---------
SageMaker routes with LEAST_OUTSTANDING_REQUESTS, so the instances in service hold about the same
number of requests in flight and a new instance is filled first. The fleet is therefore one pool:
``n`` instances holding ``q`` requests, each at concurrency ``c = q / n``, completing ``X(c)``
requests per second each with p95 TTFAB ``T(c)``, the two curves the qmax ladder measured
(:class:`~pytest_tts_scaling.core.curve.ServiceCurve`). Beyond ``queue_max_depth`` requests per
instance the container's admission gate sheds arrivals with a 503.

The policy is the one the infra deploys (:mod:`pytest_tts_scaling.core.autoscaler`): target
tracking on the per-period Maximum of per-instance concurrency, a step policy for scale-in, and
instances that serve ``provision_s`` after the decision. Detection lag is simulated by the
periods, so ``provision_s`` is the measured part of T_total, not T_total itself.

Two ways to advance the pool, sharing the policy:

- ``fluid`` (default): ``dq/dt = lambda(t) - n X(q/n)``, one implicit-Euler step per ``dt_s``
  (stable at any step length). The large-fleet limit: deterministic, and a day of one-second
  steps takes well under a second whatever the request rate.
- ``stochastic``: the same pool as a birth-death process (Poisson arrivals, completions at rate
  ``n X(q/n)`` for integer ``q``) simulated event by event, exact for that Markov chain. A fleet of
  instances that serve one request at a time is then an M/M/n queue. Its cost grows with the
  number of requests: it is for checking the fluid model and for small fleets.

The traces at the end are the two the plan runs: the surge its ratio promises to absorb, and a
day of traffic.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pytest_tts_scaling.core.autoscaler import Autoscaler, Policy, ScaleEvent
from pytest_tts_scaling.core.curve import Piecewise, ServiceCurve

Mode = Literal["fluid", "stochastic"]


@dataclass(frozen=True)
class SimulationResult:
    """Per-step series (index i covers [time_s[i], time_s[i] + dt_s)) and their totals."""

    dt_s: float
    slo_ms: float
    time_s: NDArray[np.float64]
    arrival_rps: NDArray[np.float64]
    arrived: NDArray[np.float64]
    shed: NDArray[np.float64]
    completed: NDArray[np.float64]
    in_flight: NDArray[np.float64]
    serving: NDArray[np.int64]
    provisioning: NDArray[np.int64]
    ttfab_p95_ms: NDArray[np.float64]
    events: tuple[ScaleEvent, ...]

    @property
    def concurrency(self) -> NDArray[np.float64]:
        """Requests in flight per serving instance."""
        return self.in_flight / self.serving

    def _mask(self, start_s: float | None, end_s: float | None) -> NDArray[np.bool_]:
        t = self.time_s
        lo = -math.inf if start_s is None else start_s
        hi = math.inf if end_s is None else end_s
        return (t >= lo - 1e-9) & (t < hi - 1e-9)

    def shed_fraction(self, start_s: float | None = None, end_s: float | None = None) -> float:
        """Share of the requests arriving in [start_s, end_s) that the admission gate refused."""
        m = self._mask(start_s, end_s)
        arrived = float(self.arrived[m].sum())
        return float(self.shed[m].sum()) / arrived if arrived > 0 else 0.0

    @property
    def total_arrived(self) -> float:
        return float(self.arrived.sum())

    @property
    def total_shed(self) -> float:
        return float(self.shed.sum())

    @property
    def worst_ttfab_p95_ms(self) -> float:
        """The highest p95 TTFAB an admitted request met (steps that admitted anything)."""
        admitted = (self.arrived - self.shed) > 0
        if not admitted.any():
            return 0.0
        return float(self.ttfab_p95_ms[admitted].max())

    @property
    def slo_violation_s(self) -> float:
        """Seconds during which p95 TTFAB was above the SLO."""
        return float((self.ttfab_p95_ms > self.slo_ms).sum()) * self.dt_s

    @property
    def admitted_over_slo(self) -> float:
        """Requests admitted while p95 TTFAB was above the SLO."""
        over = self.ttfab_p95_ms > self.slo_ms
        return float((self.arrived - self.shed)[over].sum())

    @property
    def instance_hours(self) -> float:
        """Instances paid for (serving and provisioning) integrated over the run."""
        return float((self.serving + self.provisioning).sum()) * self.dt_s / 3600.0

    @property
    def mean_in_flight(self) -> float:
        return float(self.in_flight.mean()) if self.in_flight.size else 0.0

    def last_shed_s(self) -> float | None:
        """Start of the last step that shed anything, or None."""
        shedding = np.nonzero(self.shed > 1e-9)[0]
        return float(self.time_s[shedding[-1]]) if shedding.size else None

    def summary(self) -> dict[str, float]:
        return {
            "arrived": self.total_arrived,
            "shed": self.total_shed,
            "shed_fraction": self.shed_fraction(),
            "worst_ttfab_p95_ms": self.worst_ttfab_p95_ms,
            "slo_violation_s": self.slo_violation_s,
            "admitted_over_slo": self.admitted_over_slo,
            "instance_hours": self.instance_hours,
            "max_instances": float((self.serving + self.provisioning).max()),
        }


def simulate(
    arrival_rps: ArrayLike,
    *,
    curve: ServiceCurve,
    policy: Policy,
    slo_ms: float,
    dt_s: float = 1.0,
    initial_instances: int | None = None,
    initial_in_flight: float | None = None,
    mode: Mode = "fluid",
    seed: int = 0,
) -> SimulationResult:
    """Run the fleet through ``arrival_rps`` (one arrival rate per step of ``dt_s`` seconds).

    The fleet starts with ``initial_instances`` (default ``policy.min_instances``) serving and
    ``initial_in_flight`` requests (default: the steady state of the first step's rate, or empty
    when that rate is beyond the fleet).
    """
    rates = [float(r) for r in np.asarray(arrival_rps, dtype=float).ravel()]
    if any(not math.isfinite(r) or r < 0 for r in rates):
        raise ValueError("arrival rates must be finite and >= 0")
    if dt_s <= 0:
        raise ValueError(f"dt_s must be > 0, got {dt_s}")
    steps_per_period = policy.period_s / dt_s
    if abs(steps_per_period - round(steps_per_period)) > 1e-9 or round(steps_per_period) < 1:
        raise ValueError(f"period_s {policy.period_s} must be a whole number of dt_s {dt_s}")
    per_period = round(steps_per_period)
    limit = None if policy.queue_max_depth is None else float(policy.queue_max_depth)
    sustained = curve.sustained(limit)
    ttfab = curve.ttfab_curve()

    n = policy.min_instances if initial_instances is None else initial_instances
    if not 1 <= n <= policy.max_instances:
        raise ValueError(f"initial_instances must be within 1..{policy.max_instances}, got {n}")
    if initial_in_flight is None:
        c0 = curve.concurrency_for(rates[0] / n, limit) if rates else 0.0
        initial_in_flight = 0.0 if c0 is None else c0 * n
    q: float = float(initial_in_flight)
    if mode == "stochastic":
        q = float(round(q))
        advance: _Advance = _StochasticAdvance(sustained, dt_s, random.Random(seed))
    elif mode == "fluid":
        advance = _FluidAdvance(sustained, dt_s)
    else:
        raise ValueError(f"mode must be 'fluid' or 'stochastic', got {mode!r}")

    steps = len(rates)
    arrived_l, shed_l, completed_l, in_flight_l, ttfab_l = ([0.0] * steps for _ in range(5))
    serving_l, provisioning_l = [0] * steps, [0] * steps
    events: list[ScaleEvent] = []
    pending: list[float] = []  # ready times of instances being provisioned
    period_max = 0.0
    scaler = Autoscaler(policy)

    for i, rate in enumerate(rates):
        now = i * dt_s
        if pending:
            ready = [t for t in pending if t <= now + 1e-9]
            if ready:
                n += len(ready)
                pending = [t for t in pending if t > now + 1e-9]
        cap = math.inf if limit is None else limit * n
        q, arrived, shed, done, mean_q = advance(q, rate, n, cap)
        c = mean_q / n
        arrived_l[i], shed_l[i], completed_l[i] = arrived, shed, done
        in_flight_l[i] = mean_q
        ttfab_l[i] = ttfab(c)
        serving_l[i], provisioning_l[i] = n, len(pending)
        period_max = max(period_max, c)
        if (i + 1) % per_period:
            continue
        # End of an alarm period: the Maximum over it is one datapoint for both alarms.
        metric, period_max = period_max, 0.0
        event = scaler.decide(now + dt_s, metric, n, len(pending))
        if event is None:
            continue
        events.append(event)
        if event.direction == "out":
            pending.extend([event.ready_at_s] * event.instances)
        else:
            n -= 1

    return SimulationResult(
        dt_s=dt_s,
        slo_ms=slo_ms,
        time_s=np.arange(steps, dtype=float) * dt_s,
        arrival_rps=np.asarray(rates, dtype=float),
        arrived=np.asarray(arrived_l, dtype=float),
        shed=np.asarray(shed_l, dtype=float),
        completed=np.asarray(completed_l, dtype=float),
        in_flight=np.asarray(in_flight_l, dtype=float),
        serving=np.asarray(serving_l, dtype=np.int64),
        provisioning=np.asarray(provisioning_l, dtype=np.int64),
        ttfab_p95_ms=np.asarray(ttfab_l, dtype=float),
        events=tuple(events),
    )


# (q, rate, n, cap) -> (q after, arrived, shed, completed, mean q over the step)
_Advance = Callable[[float, float, int, float], tuple[float, float, float, float, float]]


class _FluidAdvance:
    """One implicit-Euler step of dq/dt = rate - n X(q/n), with the admission bound.

    With X non-decreasing, q' + n dt X(q'/n) = q + arrivals has exactly one root, found on the
    piecewise-linear curve without iterating.
    """

    def __init__(self, sustained: Piecewise, dt_s: float) -> None:
        self.dt = dt_s
        self.cs = sustained.xs
        self.xs = sustained.ys
        self.gs = [c + dt_s * x for c, x in zip(self.cs, self.xs, strict=True)]
        self.throughput = sustained

    def _level(self, load: float, n: int) -> float:
        """q' with q' + n dt X(q'/n) = load."""
        v = load / n
        gs, cs = self.gs, self.cs
        if v >= gs[-1]:
            return (cs[-1] + v - gs[-1]) * n
        k = bisect_right(gs, v) - 1
        u = cs[k] + (v - gs[k]) * (cs[k + 1] - cs[k]) / (gs[k + 1] - gs[k])
        return u * n

    def __call__(
        self, q: float, rate: float, n: int, cap: float
    ) -> tuple[float, float, float, float, float]:
        arrived = rate * self.dt
        after = self._level(q + arrived, n)
        if after <= cap:
            return after, arrived, 0.0, q + arrived - after, after
        drained = self._level(q, n)
        if drained >= cap:  # still above the bound without arrivals (after a scale-in)
            return drained, arrived, arrived, q - drained, drained
        # Admit exactly what holds the level at the bound through the step.
        throughput = self.throughput(cap / n)
        admitted = cap + n * self.dt * throughput - q
        return cap, arrived, arrived - admitted, n * self.dt * throughput, cap


class _StochasticAdvance:
    """Exact event-by-event birth-death step; the state q is a whole number of requests."""

    def __init__(self, sustained: Piecewise, dt_s: float, rng: random.Random) -> None:
        self.curve = sustained
        self.dt = dt_s
        self.rng = rng

    def __call__(
        self, q: float, rate: float, n: int, cap: float
    ) -> tuple[float, float, float, float, float]:
        rng, curve, dt = self.rng, self.curve, self.dt
        k = int(q)
        t = area = 0.0
        arrived = shed = done = 0
        while True:
            service = n * curve(k / n) if k > 0 else 0.0
            total = rate + service
            wait = rng.expovariate(total) if total > 0 else math.inf
            if t + wait >= dt:
                area += k * (dt - t)
                break
            area += k * wait
            t += wait
            if rng.random() * total < rate:
                arrived += 1
                if k < cap:
                    k += 1
                else:
                    shed += 1
            else:
                k -= 1
                done += 1
        return float(k), float(arrived), float(shed), float(done), area / dt


def surge_trace(
    base_rps: float, ratio: float, *, lead_s: float, ramp_s: float, hold_s: float, dt_s: float = 1.0
) -> NDArray[np.float64]:
    """``base_rps`` for ``lead_s``, rising linearly to ``ratio * base_rps`` over ``ramp_s``, held
    for ``hold_s``: the growth the surge ratio promises to absorb within one T_total.
    """
    t = np.arange(0.0, lead_s + ramp_s + hold_s, dt_s)
    rise = np.clip((t + dt_s / 2 - lead_s) / ramp_s, 0.0, 1.0) if ramp_s > 0 else (t >= lead_s)
    return np.asarray(base_rps * (1.0 + (ratio - 1.0) * rise), dtype=float)


def diurnal_trace(
    peak_rps: float, trough_rps: float, *, hours: float = 24.0, dt_s: float = 1.0
) -> NDArray[np.float64]:
    """A day of traffic: a cosine from ``trough_rps`` at midnight to ``peak_rps`` at noon."""
    t = np.arange(0.0, hours * 3600.0, dt_s)
    phase = (1.0 - np.cos(2.0 * math.pi * t / 86400.0)) / 2.0
    return np.asarray(trough_rps + (peak_rps - trough_rps) * phase, dtype=float)


def hourly_trace(hourly_rps: Sequence[float], *, dt_s: float = 1.0) -> NDArray[np.float64]:
    """A day of traffic from one rate per hour: each rate at the middle of its hour, linear in
    between, the day wrapping from its last hour to its first."""
    hours = len(hourly_rps)
    t = np.arange(0.0, hours * 3600.0, dt_s)
    middles = (np.arange(hours + 2) - 0.5) * 3600.0
    rates = [hourly_rps[-1], *hourly_rps, hourly_rps[0]]
    return np.asarray(np.interp(t + dt_s / 2, middles, rates), dtype=float)
