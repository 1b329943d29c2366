"""The plan's numbers from the measured curve: CloudWatch ratio, fleet size, the safe floor, the
knee and the stages' durations. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction
from itertools import pairwise

from pytest_tts_scaling.core.curve import ServiceCurve
from pytest_tts_scaling.core.plan.inputs import KNEE_SHARE
from pytest_tts_scaling.core.schema import Rung, TtotalArtifact
from pytest_tts_scaling.core.timeline import parse_iso
from pytest_tts_scaling.errors import ArtifactError


def cw_ratio_near(rungs: Sequence[Rung], c_max: float) -> tuple[float, int | None]:
    """The CloudWatch/client ratio at the usable rung nearest C_scale_max (1.0 if none)."""
    measured = [r for r in rungs if r.usable and r.cw_ratio is not None and r.cw_ratio > 0]
    if not measured:
        return 1.0, None
    nearest = min(measured, key=lambda r: (abs(r.concurrency - c_max), r.concurrency))
    return float(nearest.cw_ratio or 1.0), nearest.concurrency


def fleet_size(rps: float, per_instance: float) -> int:
    """ceil(rps / X), not fooled by float noise at whole numbers."""
    return max(0, math.ceil(rps / per_instance - 1e-9))


def smallest_safe_floor(c_max: Fraction, c_min: Fraction, cap: int) -> int:
    """Smallest N >= 2 with N / (N - 1) <= C_scale_max / C_scale_min, exactly.

    N / (N - 1) <= r  <=>  N >= r / (r - 1). With no surge margin (r = 1) no N exists and no
    scale-in is safe: the fleet size the plan may reach, ``cap``, is returned.
    """
    if c_max <= c_min:
        return cap
    r = c_max / c_min
    n = max(2, math.ceil(r / (r - 1)))
    assert Fraction(n, n - 1) <= r
    assert n == 2 or Fraction(n - 1, n - 2) > r
    return n


def knee_concurrency(curve: ServiceCurve) -> float:
    """The lowest measured concurrency whose throughput is within 5% of the highest."""
    top = curve.ceiling_rps
    return next(
        c
        for c, x in zip(curve.concurrency, curve.throughput_rps, strict=True)
        if x >= KNEE_SHARE * top
    )


def stage_durations(ttotal: TtotalArtifact) -> list[tuple[str, float]]:
    """Seconds each stage took since the one before, from desired_set (the clock's start) on."""
    timed: list[tuple[datetime, str]] = []
    for stage in ttotal.stages:
        try:
            at = parse_iso(stage.at)
        except ValueError:
            raise ArtifactError(
                f"ttotal artifact: field 'stages.{stage.stage}.at': expected ISO 8601, "
                f"got {stage.at!r}"
            ) from None
        timed.append((at, stage.stage))
    timed.sort()
    names = [name for _, name in timed]
    start = names.index("desired_set") if "desired_set" in names else 0
    clock = timed[start:]
    return [(name, (at - prev).total_seconds()) for (prev, _), (at, name) in pairwise(clock)]
