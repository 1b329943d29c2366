"""What the plan starts from: the operator's inputs, the limits it holds them to, and the
refusals of artifacts that cannot be planned (each one line naming what differs). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from pytest_tts_scaling.core.curve import ServiceCurve
from pytest_tts_scaling.core.schema import QmaxArtifact, Rung, TtotalArtifact
from pytest_tts_scaling.core.simulate import diurnal_trace, hourly_trace
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import ArtifactError, InputError, MismatchError

# SageMaker ends an invocation after 60 s.
INVOCATION_LIMIT_S = 60.0
# Target tracking on the high-resolution metric: 10-s periods, 3 above target to scale out; the
# step policy's scale-in alarm: 3 periods at or below the threshold (docs/steps.md,
# docs/production.md#deploying).
ALARM_PERIOD_S = 10.0
ALARM_PERIODS = 3
# Throughput within this share of the highest measured has stopped growing (the knee).
KNEE_SHARE = 0.95
# Throughput that falls below this share of the ceiling at or below Q_max has collapsed.
COLLAPSE_SHARE = 0.90
# Measured completions per second and Little's law N / mean latency may differ this much.
LITTLE_TOLERANCE = 0.15
# Q_max across repeated ladders may spread this much (relative) before it is a warning.
REPEAT_SPREAD = 0.10
# Simulated surge: steady load for this long before the rise.
SURGE_LEAD_S = 60.0
# CloudWatch ratios across rungs may spread this much (relative) before it is a warning.
RATIO_SPREAD = 0.20
# A traffic profile gives one rate per hour of a day.
HOURS = 24


@dataclass(frozen=True)
class PlanInputs:
    """The operator's choices (docs/steps.md#plan) and where the two artifacts came from."""

    peak_rps: float | None
    trough_rps: float = 0.0
    min_floor: int = 1
    surge_ratio: float = 1.25
    slo_ms: float | None = None
    allow_config_mismatch: bool = False
    qmax_name: str | None = None
    ttotal_name: str | None = None
    # A day of traffic, one rate per hour (--hourly-rps); None: a cosine from trough to peak.
    hourly_rps: tuple[float, ...] | None = None


def day_traffic(inputs: PlanInputs) -> NDArray[np.float64]:
    """The day a fleet is costed over, one rate per alarm period: the hourly profile when given,
    else a cosine between trough and peak."""
    assert inputs.peak_rps is not None
    if inputs.hourly_rps is not None:
        return hourly_trace(inputs.hourly_rps, dt_s=ALARM_PERIOD_S)
    return diurnal_trace(inputs.peak_rps, inputs.trough_rps, dt_s=ALARM_PERIOD_S)


def label(name: str | None, fallback: str) -> str:
    return name or fallback


def check_inputs(qmax: QmaxArtifact, ttotal: TtotalArtifact, inputs: PlanInputs) -> None:
    q_name = label(inputs.qmax_name, "qmax artifact")
    t_name = label(inputs.ttotal_name, "ttotal artifact")
    if not 1.0 <= inputs.surge_ratio < 1.5 or not math.isfinite(inputs.surge_ratio):
        raise InputError(
            f"{both_flags('--surge-ratio')} {inputs.surge_ratio:g}: expected a number in [1, 1.5)"
        )
    if inputs.peak_rps is None:
        raise InputError(
            f"{both_flags('--peak-rps')} is required: the peak requests per second the fleet "
            "must serve, e.g. 5000"
        )
    if not math.isfinite(inputs.peak_rps) or inputs.peak_rps <= 0:
        raise InputError(
            f"{both_flags('--peak-rps')} {inputs.peak_rps:g}: expected a positive number"
        )
    if not math.isfinite(inputs.trough_rps) or inputs.trough_rps < 0:
        raise InputError(
            f"{both_flags('--trough-rps')} {inputs.trough_rps:g}: expected a number >= 0"
        )
    if inputs.trough_rps > inputs.peak_rps:
        raise InputError(
            f"{both_flags('--trough-rps')} {inputs.trough_rps:g} is above "
            f"{both_flags('--peak-rps')} {inputs.peak_rps:g}: expected trough <= peak"
        )
    if inputs.hourly_rps is not None:
        check_hourly(inputs.hourly_rps, inputs.peak_rps)
    if inputs.min_floor < 1:
        raise InputError(
            f"{both_flags('--min-floor')} {inputs.min_floor}: expected a whole number >= 1"
        )
    if qmax.model != ttotal.model:
        raise MismatchError(
            f"{t_name} measured model {ttotal.model!r}, {q_name} measured {qmax.model!r}: "
            "expected the same model"
        )
    if qmax.slug != ttotal.slug and not inputs.allow_config_mismatch:
        raise MismatchError(
            f"{t_name} has slug {ttotal.slug!r}, {q_name} has {qmax.slug!r}: they were measured "
            "on different configurations; re-measure, or pass "
            f"{both_flags('--allow-config-mismatch')}"
        )
    if qmax.transport != ttotal.transport:
        raise MismatchError(
            f"{t_name} was measured over {ttotal.transport}, {q_name} over {qmax.transport}: "
            "expected the same transport"
        )
    if inputs.slo_ms is not None and inputs.slo_ms != qmax.slo_ms:
        raise MismatchError(
            f"{both_flags('--slo-ms')} {inputs.slo_ms:g} differs from the SLO {q_name} was "
            f"measured against ({qmax.slo_ms:g} ms): Q_max holds only for that SLO; re-measure "
            f"qmax or pass {both_flags('--slo-ms')} {qmax.slo_ms:g}"
        )
    if qmax.q_max is None:
        raise ArtifactError(
            f"{q_name}: field 'q_max': no Q_max (no rung met the SLO); expected a whole number"
        )
    if qmax.q_max < 1:
        raise ArtifactError(f"{q_name}: field 'q_max': expected >= 1, got {qmax.q_max}")
    for field in ("s_p95_s", "ttfab_p95_at_c1_ms"):
        value = getattr(qmax, field)
        if value is None or not math.isfinite(value) or value <= 0:
            raise ArtifactError(
                f"{q_name}: field '{field}': expected a positive number (measured at "
                f"concurrency 1), got {value!r}"
            )
    if not math.isfinite(ttotal.t_total_s) or ttotal.t_total_s <= 0:
        raise ArtifactError(
            f"{t_name}: field 't_total_s': expected a positive number, got {ttotal.t_total_s!r}"
        )


def check_hourly(hourly_rps: Sequence[float], peak_rps: float) -> None:
    flag = both_flags("--hourly-rps")
    if len(hourly_rps) != HOURS:
        raise InputError(f"{flag}: {len(hourly_rps)} rates: expected {HOURS}, one per hour")
    if any(not math.isfinite(r) or r < 0 for r in hourly_rps):
        raise InputError(f"{flag}: expected numbers >= 0")
    if max(hourly_rps) > peak_rps:
        raise InputError(
            f"{flag} reaches {max(hourly_rps):g} rps, above {both_flags('--peak-rps')} "
            f"{peak_rps:g}: expected every hour <= the peak the fleet is sized for"
        )


def measured_curve(qmax: QmaxArtifact, name: str | None) -> ServiceCurve:
    try:
        return ServiceCurve.from_rungs(qmax.rungs)
    except ValueError as exc:
        raise ArtifactError(f"{label(name, 'qmax artifact')}: field 'rungs': {exc}") from None


def little_curve(rungs: Sequence[Rung], name: str | None) -> ServiceCurve:
    """Throughput by Little's law, N / mean latency, at the same rungs."""
    points: dict[int, tuple[float, float]] = {}
    for r in rungs:
        mean = r.latency_ms.mean
        if r.usable and r.completed and mean and mean > 0:
            n = r.concurrency_mean if r.concurrency_mean > 0 else float(r.concurrency)
            p95 = r.judged_ms.p95 if r.judged_ms is not None else None
            points.setdefault(r.concurrency, (n / (mean / 1000.0), float(p95 or 0.0)))
    if not points:
        raise ArtifactError(
            f"{label(name, 'qmax artifact')}: field 'rungs': no usable rung with a mean latency"
        )
    keys = sorted(points)
    return ServiceCurve(
        concurrency=tuple(float(k) for k in keys),
        throughput_rps=tuple(points[k][0] for k in keys),
        ttfab_p95_ms=tuple(points[k][1] for k in keys),
    )
