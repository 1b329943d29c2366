"""A fleet under a traffic trace and an autoscaling policy. Pure: numbers in, numbers out.

The model
---------
SageMaker routes with LEAST_OUTSTANDING_REQUESTS, so the instances in service hold about the same
number of requests in flight and a new instance is filled first. The fleet is therefore one pool:
``n`` instances holding ``q`` requests, each at concurrency ``c = q / n``. An instance at
concurrency ``c`` completes ``X(c)`` requests per second and answers with p95 TTFAB ``T(c)``, the
two curves the qmax ladder measured (a closed loop at ``c`` is exactly "``c`` in flight"; see
:class:`ServiceCurve` for interpolation and extrapolation). Beyond ``queue_max_depth`` requests
per instance the container's admission gate sheds arrivals with a 503.

The policy is the one the infra deploys: target tracking on per-instance concurrency (the
CloudWatch Maximum per period) against ``target_concurrency``, firing after ``scale_out_periods``
periods above it, sized ``ceil(n * metric / target)``, with a cooldown; new instances serve
``provision_s`` after the decision. Scale-in is a step policy: ``scale_in_periods`` periods at or
below ``scale_in_concurrency`` remove one instance, then a cooldown. Detection lag is simulated by
the periods, so ``provision_s`` is the measured part of T_total, not T_total itself.

Two ways to advance the pool, sharing the policy:

- ``fluid`` (default): ``dq/dt = lambda(t) - n X(q/n)``, one implicit-Euler step per ``dt_s``
  (stable at any step length). The large-fleet limit: deterministic, and a day of one-second
  steps takes well under a second whatever the request rate.
- ``stochastic``: the same pool as a birth-death process (Poisson arrivals, completions at rate
  ``n X(q/n)`` for integer ``q``) simulated event by event, exact for that Markov chain. A fleet of
  instances that serve one request at a time is then an M/M/n queue. Its cost grows with the
  number of requests: it is for checking the fluid model and for small fleets.
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

from pytest_tts_scaling.core.schema import Rung

Mode = Literal["fluid", "stochastic"]


class _Piecewise:
    """y(x) linear between knots, constant before the first, ``beyond`` slope after the last."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], beyond: float = 0.0) -> None:
        self.xs = [float(x) for x in xs]
        self.ys = [float(y) for y in ys]
        self.beyond = float(beyond)

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1] + self.beyond * (x - xs[-1])
        i = bisect_right(xs, x) - 1
        x0, x1 = xs[i], xs[i + 1]
        return ys[i] + (ys[i + 1] - ys[i]) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class ServiceCurve:
    """What one instance does at each concurrency, from the ladder's usable rungs.

    Throughput is linear from (0, 0) to the first rung and between rungs, and held at the top
    rung's value beyond it (never more than was measured). p95 TTFAB is the first rung's value
    below it, linear between rungs, and beyond the top rung grows by the larger of the last
    segment's slope and 1000 / X(top) ms per extra request: each request queued ahead of a new
    one costs it one service interval at the measured completion rate.
    """

    concurrency: tuple[float, ...]
    throughput_rps: tuple[float, ...]
    ttfab_p95_ms: tuple[float, ...]

    def __post_init__(self) -> None:
        n = len(self.concurrency)
        if n == 0 or len(self.throughput_rps) != n or len(self.ttfab_p95_ms) != n:
            raise ValueError(
                "a service curve needs one throughput and one p95 TTFAB per concurrency"
            )
        if any(not math.isfinite(c) or c <= 0 for c in self.concurrency) or any(
            b <= a for a, b in zip(self.concurrency, self.concurrency[1:], strict=False)
        ):
            raise ValueError(f"concurrency must be increasing and > 0, got {self.concurrency}")
        if any(not math.isfinite(x) or x < 0 for x in self.throughput_rps) or not any(
            x > 0 for x in self.throughput_rps
        ):
            raise ValueError(f"throughput must be >= 0 and not all 0, got {self.throughput_rps}")
        if any(not math.isfinite(t) or t < 0 for t in self.ttfab_p95_ms):
            raise ValueError(f"p95 TTFAB must be >= 0 ms, got {self.ttfab_p95_ms}")

    @classmethod
    def from_rungs(cls, rungs: Sequence[Rung]) -> ServiceCurve:
        """The curve through the usable rungs that completed requests (one per concurrency)."""
        best: dict[int, Rung] = {}
        for rung in rungs:
            if not rung.usable or rung.completed == 0 or rung.ttfab_ms.p95 is None:
                continue
            kept = best.get(rung.concurrency)
            if kept is None or rung.completed > kept.completed:
                best[rung.concurrency] = rung
        if not best:
            raise ValueError("no usable rung with completed requests to build a service curve")
        ordered = [best[c] for c in sorted(best)]
        return cls(
            concurrency=tuple(float(r.concurrency) for r in ordered),
            throughput_rps=tuple(r.throughput_rps for r in ordered),
            ttfab_p95_ms=tuple(float(r.ttfab_ms.p95 or 0.0) for r in ordered),
        )

    @property
    def ceiling_rps(self) -> float:
        """The most completions per second any rung measured."""
        return max(self.throughput_rps)

    def throughput(self, concurrency: float) -> float:
        return _Piecewise((0.0, *self.concurrency), (0.0, *self.throughput_rps))(concurrency)

    def ttfab_p95(self, concurrency: float) -> float:
        return self.ttfab_curve()(concurrency)

    def ttfab_curve(self) -> _Piecewise:
        cs, ts = self.concurrency, self.ttfab_p95_ms
        last_slope = (ts[-1] - ts[-2]) / (cs[-1] - cs[-2]) if len(cs) > 1 else 0.0
        top = self.throughput_rps[-1]
        queueing = 1000.0 / top if top > 0 else math.inf
        return _Piecewise(cs, ts, beyond=max(last_slope, queueing))

    def sustained(self, limit: float | None = None) -> _Piecewise:
        """Throughput never above what the instance measured at any higher concurrency up to
        ``limit`` (the admission bound): non-decreasing, so the fluid model has one solution.
        """
        xs = [0.0, *self.concurrency]
        ys = [0.0, *self.throughput_rps]
        if limit is not None:
            at_limit = self.throughput(limit)
            keep = [i for i, x in enumerate(xs) if x < limit]
            xs = [xs[i] for i in keep] + [float(limit)]
            ys = [ys[i] for i in keep] + [at_limit]
        for i in range(len(ys) - 2, 0, -1):
            ys[i] = min(ys[i], ys[i + 1])
        return _Piecewise(xs, ys)

    def concurrency_for(self, rate_per_instance: float, limit: float | None = None) -> float | None:
        """The concurrency at which an instance completes ``rate_per_instance`` requests per
        second (the fluid steady state), or None when it cannot keep up at that rate.
        """
        curve = self.sustained(limit)
        if rate_per_instance <= 0:
            return 0.0
        if rate_per_instance > curve.ys[-1]:
            return None
        for i in range(1, len(curve.xs)):
            if curve.ys[i] >= rate_per_instance:
                y0, y1 = curve.ys[i - 1], curve.ys[i]
                x0, x1 = curve.xs[i - 1], curve.xs[i]
                return x0 + (x1 - x0) * (rate_per_instance - y0) / (y1 - y0) if y1 > y0 else x0
        return curve.xs[-1]  # pragma: no cover - the ceiling check above returns first


@dataclass(frozen=True)
class Policy:
    """The scaling policy and admission bound, in client concurrency units (SPEC §8)."""

    target_concurrency: float
    scale_in_concurrency: float
    min_instances: int = 1
    max_instances: int = 1
    scale_out_cooldown_s: float = 30.0
    scale_in_cooldown_s: float = 300.0
    provision_s: float = 0.0
    queue_max_depth: int | None = None
    period_s: float = 10.0
    scale_out_periods: int = 3
    scale_in_periods: int = 3

    def __post_init__(self) -> None:
        if self.target_concurrency <= 0:
            raise ValueError(f"target_concurrency must be > 0, got {self.target_concurrency}")
        if not 0 <= self.scale_in_concurrency <= self.target_concurrency:
            raise ValueError("scale_in_concurrency must be within [0, target_concurrency]")
        if not 1 <= self.min_instances <= self.max_instances:
            raise ValueError(
                f"expected 1 <= min_instances <= max_instances, got "
                f"{self.min_instances}..{self.max_instances}"
            )
        if self.queue_max_depth is not None and self.queue_max_depth < 1:
            raise ValueError(f"queue_max_depth must be >= 1 or None, got {self.queue_max_depth}")
        if self.period_s <= 0 or self.scale_out_periods < 1 or self.scale_in_periods < 1:
            raise ValueError("period_s must be > 0 and the period counts >= 1")
        if min(self.provision_s, self.scale_out_cooldown_s, self.scale_in_cooldown_s) < 0:
            raise ValueError("provision_s and the cooldowns must be >= 0")


@dataclass(frozen=True)
class ScaleEvent:
    at_s: float
    direction: Literal["out", "in"]
    instances: int
    ready_at_s: float
    metric: float


class Autoscaler:
    """The policy's decisions, one alarm period at a time, in seconds of any clock.

    One definition for the simulation and for the local fleet's emulation of the platform:
    target tracking fires after ``scale_out_periods`` periods whose Maximum is above the target,
    sized ``ceil(n * metric / target)`` less what is already provisioning, then waits out its
    cooldown; the step policy removes one instance after ``scale_in_periods`` periods at or below
    the scale-in threshold, never while instances provision or within either cooldown.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.above = 0
        self.below = 0
        self.out_cooldown_until = -math.inf
        self.in_cooldown_until = -math.inf

    def decide(self, end_s: float, metric: float, serving: int, pending: int) -> ScaleEvent | None:
        """The scaling event at the end of one period whose Maximum was ``metric``, or None."""
        p = self.policy
        self.above = self.above + 1 if metric > p.target_concurrency else 0
        self.below = self.below + 1 if metric <= p.scale_in_concurrency else 0
        if self.above >= p.scale_out_periods and end_s >= self.out_cooldown_until - 1e-9:
            wanted = min(p.max_instances, math.ceil(serving * metric / p.target_concurrency - 1e-9))
            extra = wanted - serving - pending
            if extra <= 0:
                return None
            self.out_cooldown_until = end_s + p.scale_out_cooldown_s
            return ScaleEvent(end_s, "out", extra, end_s + p.provision_s, metric)
        if (
            self.below >= p.scale_in_periods
            and not pending
            and serving > p.min_instances
            and end_s >= self.in_cooldown_until - 1e-9
            and end_s >= self.out_cooldown_until - 1e-9
        ):
            self.in_cooldown_until = end_s + p.scale_in_cooldown_s
            return ScaleEvent(end_s, "in", 1, end_s, metric)
        return None


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

    def __init__(self, sustained: _Piecewise, dt_s: float) -> None:
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

    def __init__(self, sustained: _Piecewise, dt_s: float, rng: random.Random) -> None:
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
