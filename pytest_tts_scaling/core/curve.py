"""What one instance does at each concurrency: the two curves the qmax ladder measured.

An instance at concurrency ``c`` completes ``X(c)`` requests per second and answers with p95
TTFAB ``T(c)``; a closed loop at ``c`` is exactly "``c`` in flight", so each usable rung is one
point of both curves. The fleet model (:mod:`pytest_tts_scaling.core.simulate`), the plan's
quantities and the throughput plot all read them through :class:`ServiceCurve`. Pure.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tts_scaling.core.schema import Rung


class Piecewise:
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
        """The curve through the usable rungs that completed requests (one per concurrency), its
        p95 on the clock the SLO held (TTFAB unless the artifact names another)."""
        best: dict[int, Rung] = {}
        for rung in rungs:
            if not rung.usable or rung.completed == 0 or _p95(rung) is None:
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
            ttfab_p95_ms=tuple(float(_p95(r) or 0.0) for r in ordered),
        )

    @property
    def ceiling_rps(self) -> float:
        """The most completions per second any rung measured."""
        return max(self.throughput_rps)

    def throughput(self, concurrency: float) -> float:
        return Piecewise((0.0, *self.concurrency), (0.0, *self.throughput_rps))(concurrency)

    def ttfab_p95(self, concurrency: float) -> float:
        return self.ttfab_curve()(concurrency)

    def ttfab_curve(self) -> Piecewise:
        cs, ts = self.concurrency, self.ttfab_p95_ms
        last_slope = (ts[-1] - ts[-2]) / (cs[-1] - cs[-2]) if len(cs) > 1 else 0.0
        top = self.throughput_rps[-1]
        queueing = 1000.0 / top if top > 0 else math.inf
        return Piecewise(cs, ts, beyond=max(last_slope, queueing))

    def sustained(self, limit: float | None = None) -> Piecewise:
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
        return Piecewise(xs, ys)

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


def _p95(rung: Rung) -> float | None:
    """The p95 of the delivered requests on the rung's SLO clock."""
    judged = rung.judged_ms
    return None if judged is None else judged.p95
