"""The plan (SPEC §4): thresholds, cooldowns, fleet size and findings from the two measurements.

Pure: a qmax artifact, a ttotal artifact and the operator's inputs in, a :class:`PlanArtifact`
out; no I/O, no clock, no randomness, so the same inputs give the same bytes. Refusals raise
:mod:`pytest_tts_scaling.errors` exceptions whose one-line message names what differs.

Where the source method is wrong, the plan follows the measurement instead: the fleet is sized
from the throughput the ladder measured at C_scale_max, never from ``rps * S_mean / C_scale_max``
(on an instance that serves one request at a time that undercounts the fleet many times over),
and surge survival is decided by simulating the fleet (:mod:`pytest_tts_scaling.simulate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from itertools import pairwise
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from pytest_tts_scaling.errors import ArtifactError, InputError, MismatchError
from pytest_tts_scaling.schema import (
    Finding,
    PlanArtifact,
    QmaxArtifact,
    Rung,
    TtotalArtifact,
    Verdict,
)
from pytest_tts_scaling.simulate import (
    Policy,
    ServiceCurve,
    SimulationResult,
    diurnal_trace,
    simulate,
    surge_trace,
)
from pytest_tts_scaling.timeline import parse_iso

if TYPE_CHECKING:
    from pytest_tts_scaling.options import RunOptions

# SageMaker ends an invocation after 60 s (SPEC §10).
INVOCATION_LIMIT_S = 60.0
# Target tracking on the high-resolution metric: 10-s periods, 3 above target to scale out; the
# step policy's scale-in alarm: 3 periods at or below the threshold (SPEC §4, §8).
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


@dataclass(frozen=True)
class PlanInputs:
    """The operator's choices (SPEC §4 plan) and where the two artifacts came from."""

    peak_rps: float | None
    trough_rps: float = 0.0
    min_floor: int = 1
    surge_ratio: float = 1.25
    slo_ms: float | None = None
    allow_config_mismatch: bool = False
    qmax_name: str | None = None
    ttotal_name: str | None = None


def inputs_from_options(options: RunOptions) -> PlanInputs:
    """The plan's inputs from parsed options; artifacts are identified by file name only, so the
    same files give the same plan wherever they lie.
    """
    return PlanInputs(
        peak_rps=options.peak_rps,
        trough_rps=options.trough_rps,
        min_floor=options.min_floor,
        surge_ratio=options.surge_ratio,
        slo_ms=options.slo_ms,
        allow_config_mismatch=options.allow_config_mismatch,
        qmax_name=PurePath(options.qmax_artifact).name if options.qmax_artifact else None,
        ttotal_name=PurePath(options.ttotal_artifact).name if options.ttotal_artifact else None,
    )


@dataclass(frozen=True)
class PlanOutcome:
    """The plan artifact and what it was decided from (for reports and plots)."""

    artifact: PlanArtifact
    curve: ServiceCurve
    policy: Policy
    surge: SimulationResult
    surge_start_s: float
    surge_instances: int


def compute_plan(qmax: QmaxArtifact, ttotal: TtotalArtifact, inputs: PlanInputs) -> PlanOutcome:
    """Every SPEC §4 plan quantity, the findings and the verdict. Raises InputError subclasses."""
    _check(qmax, ttotal, inputs)
    # Established by _check:
    assert qmax.q_max is not None
    assert qmax.s_p95_s is not None
    assert qmax.ttfab_p95_at_c1_ms is not None
    assert inputs.peak_rps is not None
    q_max = qmax.q_max
    slo_ms = qmax.slo_ms
    t_total = ttotal.t_total_s
    curve = _curve(qmax, inputs.qmax_name)

    surge = Fraction(repr(float(inputs.surge_ratio)))
    h = surge - 1
    c_max = (1 - h) * q_max
    c_min = (1 - 2 * h) * q_max
    ratio, ratio_rung = _cw_ratio(qmax.rungs, float(c_max))
    w_max = max(0.0, slo_ms / 1000.0 - qmax.s_p95_s)
    scale_out_cooldown = int(min(max(t_total / 2, 10.0), 30.0))
    scale_in_cooldown = int(max(300.0, 3 * t_total))
    alarm_ms = float(math.ceil(round(qmax.ttfab_p95_at_c1_ms, 6)))

    measured_x = curve.throughput(float(c_max))
    little_x = _little_curve(qmax.rungs, inputs.qmax_name).throughput(float(c_max))
    per_instance = round(min(measured_x, little_x), 3)
    if per_instance <= 0:
        raise ArtifactError(
            f"{_name(inputs.qmax_name, 'qmax artifact')}: field 'rungs': no throughput measured "
            f"at or below C_scale_max {float(c_max):g}"
        )
    min_instances = max(inputs.min_floor, _instances(inputs.trough_rps, per_instance))
    max_instances = max(min_instances, _instances(inputs.peak_rps, per_instance))
    min_safe = _min_safe_instances(c_max, c_min, max_instances)

    policy = Policy(
        target_concurrency=float(c_max),
        scale_in_concurrency=float(c_min),
        min_instances=min_instances,
        max_instances=max_instances,
        scale_out_cooldown_s=scale_out_cooldown,
        scale_in_cooldown_s=scale_in_cooldown,
        provision_s=max(0.0, t_total - ttotal.policy_lag_bound_s),
        queue_max_depth=q_max,
        period_s=ALARM_PERIOD_S,
        scale_out_periods=ALARM_PERIODS,
        scale_in_periods=ALARM_PERIODS,
    )
    base_rps = inputs.peak_rps / float(surge)
    surge_n = min(max_instances, max(min_instances, _instances(base_rps, per_instance)))
    surge_run = simulate(
        surge_trace(
            base_rps, float(surge), lead_s=SURGE_LEAD_S, ramp_s=t_total, hold_s=2 * t_total
        ),
        curve=curve,
        policy=policy,
        slo_ms=slo_ms,
        initial_instances=surge_n,
    )

    facts = _Facts(
        qmax=qmax,
        ttotal=ttotal,
        inputs=inputs,
        curve=curve,
        h=float(h),
        c_max=float(c_max),
        c_min=float(c_min),
        ratio=ratio,
        ratio_rung=ratio_rung,
        w_max=w_max,
        measured_x=measured_x,
        little_x=little_x,
        per_instance=per_instance,
        min_instances=min_instances,
        max_instances=max_instances,
        min_safe=min_safe,
        policy=policy,
        surge_run=surge_run,
        surge_n=surge_n,
        base_rps=base_rps,
    )
    findings = _findings(facts)
    verdict = overall_verdict(findings)
    target_value = round(float(c_max) * ratio, 3)
    scale_in_value = round(float(c_min) * ratio, 3)
    artifact = PlanArtifact(
        model=qmax.model,
        slug=qmax.slug,
        inputs=_inputs_record(qmax, ttotal, inputs),
        c_scale_max=round(float(c_max), 6),
        c_scale_min=round(float(c_min), 6),
        cw_units_ratio=ratio,
        scaling_target_value=target_value,
        scale_in_threshold=scale_in_value,
        w_max_s=round(w_max, 3),
        queue_max_depth=q_max,
        scale_out_cooldown_s=scale_out_cooldown,
        scale_in_cooldown_s=scale_in_cooldown,
        min_instances=min_instances,
        max_instances=max_instances,
        min_safe_instances=min_safe,
        per_instance_rps_at_c_scale_max=per_instance,
        first_chunk_alarm_ms=alarm_ms,
        findings=findings,
        verdict=verdict,
        config_block="",
        **_extras(facts),
    )
    artifact.config_block = config_block(artifact, inputs)
    return PlanOutcome(artifact, curve, policy, surge_run, SURGE_LEAD_S, surge_n)


def _extras(f: _Facts) -> dict[str, Any]:
    """Fields beyond the SPEC §5 minimum: what the report and the config block need."""
    return {
        "instance_type": f.qmax.deployed_config.instance_type,
        "t_total_s": f.ttotal.t_total_s,
        "knee_concurrency": knee_concurrency(f.curve),
        "surge_simulation": _surge_record(f),
    }


def overall_verdict(findings: Sequence[Finding]) -> Verdict:
    """stop if any finding stops, else warn if any warns, else ok."""
    verdicts = {f.verdict for f in findings}
    if "stop" in verdicts:
        return "stop"
    return "warn" if "warn" in verdicts else "ok"


# --- refusals ------------------------------------------------------------------------------


def _name(name: str | None, fallback: str) -> str:
    return name or fallback


def _check(qmax: QmaxArtifact, ttotal: TtotalArtifact, inputs: PlanInputs) -> None:
    q_name = _name(inputs.qmax_name, "qmax artifact")
    t_name = _name(inputs.ttotal_name, "ttotal artifact")
    if not 1.0 <= inputs.surge_ratio < 1.5 or not math.isfinite(inputs.surge_ratio):
        raise InputError(f"--surge-ratio {inputs.surge_ratio:g}: expected a number in [1, 1.5)")
    if inputs.peak_rps is None:
        raise InputError(
            "--peak-rps is required: the peak requests per second the fleet must serve, "
            "e.g. --peak-rps 5000"
        )
    if not math.isfinite(inputs.peak_rps) or inputs.peak_rps <= 0:
        raise InputError(f"--peak-rps {inputs.peak_rps:g}: expected a positive number")
    if not math.isfinite(inputs.trough_rps) or inputs.trough_rps < 0:
        raise InputError(f"--trough-rps {inputs.trough_rps:g}: expected a number >= 0")
    if inputs.trough_rps > inputs.peak_rps:
        raise InputError(
            f"--trough-rps {inputs.trough_rps:g} is above --peak-rps {inputs.peak_rps:g}: "
            "expected trough <= peak"
        )
    if inputs.min_floor < 1:
        raise InputError(f"--min-floor {inputs.min_floor}: expected a whole number >= 1")
    if qmax.model != ttotal.model:
        raise MismatchError(
            f"{t_name} measured model {ttotal.model!r}, {q_name} measured {qmax.model!r}: "
            "expected the same model"
        )
    if qmax.slug != ttotal.slug and not inputs.allow_config_mismatch:
        raise MismatchError(
            f"{t_name} has slug {ttotal.slug!r}, {q_name} has {qmax.slug!r}: they were measured "
            "on different configurations; re-measure, or pass --allow-config-mismatch"
        )
    if qmax.transport != ttotal.transport:
        raise MismatchError(
            f"{t_name} was measured over {ttotal.transport}, {q_name} over {qmax.transport}: "
            "expected the same transport"
        )
    if inputs.slo_ms is not None and inputs.slo_ms != qmax.slo_ms:
        raise MismatchError(
            f"--slo-ms {inputs.slo_ms:g} differs from the SLO {q_name} was measured against "
            f"({qmax.slo_ms:g} ms): Q_max holds only for that SLO; re-measure qmax or pass "
            f"--slo-ms {qmax.slo_ms:g}"
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


def _curve(qmax: QmaxArtifact, name: str | None) -> ServiceCurve:
    try:
        return ServiceCurve.from_rungs(qmax.rungs)
    except ValueError as exc:
        raise ArtifactError(f"{_name(name, 'qmax artifact')}: field 'rungs': {exc}") from None


def _little_curve(rungs: Sequence[Rung], name: str | None) -> ServiceCurve:
    """Throughput by Little's law, N / mean latency, at the same rungs."""
    points: dict[int, tuple[float, float]] = {}
    for r in rungs:
        mean = r.latency_ms.mean
        if r.usable and r.completed and mean and mean > 0:
            n = r.concurrency_mean if r.concurrency_mean > 0 else float(r.concurrency)
            points.setdefault(r.concurrency, (n / (mean / 1000.0), float(r.ttfab_ms.p95 or 0.0)))
    if not points:
        raise ArtifactError(
            f"{_name(name, 'qmax artifact')}: field 'rungs': no usable rung with a mean latency"
        )
    keys = sorted(points)
    return ServiceCurve(
        concurrency=tuple(float(k) for k in keys),
        throughput_rps=tuple(points[k][0] for k in keys),
        ttfab_p95_ms=tuple(points[k][1] for k in keys),
    )


# --- quantities ----------------------------------------------------------------------------


def _cw_ratio(rungs: Sequence[Rung], c_max: float) -> tuple[float, int | None]:
    """The CloudWatch/client ratio at the usable rung nearest C_scale_max (1.0 if none)."""
    measured = [r for r in rungs if r.usable and r.cw_ratio is not None and r.cw_ratio > 0]
    if not measured:
        return 1.0, None
    nearest = min(measured, key=lambda r: (abs(r.concurrency - c_max), r.concurrency))
    return float(nearest.cw_ratio or 1.0), nearest.concurrency


def _instances(rps: float, per_instance: float) -> int:
    """ceil(rps / X), not fooled by float noise at whole numbers."""
    return max(0, math.ceil(rps / per_instance - 1e-9))


def _min_safe_instances(c_max: Fraction, c_min: Fraction, cap: int) -> int:
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


def _stage_durations(ttotal: TtotalArtifact) -> list[tuple[str, float]]:
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


# --- findings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Facts:
    qmax: QmaxArtifact
    ttotal: TtotalArtifact
    inputs: PlanInputs
    curve: ServiceCurve
    h: float
    c_max: float
    c_min: float
    ratio: float
    ratio_rung: int | None
    w_max: float
    measured_x: float
    little_x: float
    per_instance: float
    min_instances: int
    max_instances: int
    min_safe: int
    policy: Policy
    surge_run: SimulationResult
    surge_n: int
    base_rps: float

    @property
    def q_max(self) -> int:
        assert self.qmax.q_max is not None
        return self.qmax.q_max

    @property
    def s_p95(self) -> float:
        assert self.qmax.s_p95_s is not None
        return self.qmax.s_p95_s


def _finding(name: str, verdict: Verdict, detail: str, recommendation: str) -> Finding:
    return Finding(name=name, verdict=verdict, detail=detail, recommendation=recommendation)


def _findings(f: _Facts) -> list[Finding]:
    found = [
        _measurement_trust(f),
        _repeatability(f),
        _config_match(f),
        _slo_budget(f),
        _invocation_ceiling(f),
        _queue_depth(f),
        _threshold_units(f),
        _knee_finding(f),
        _surge_survival(f),
        _scale_in_safety(f),
        _fleet_cost(f),
        _provision_stage(f),
    ]
    return [finding for finding in found if finding is not None]


def _measurement_trust(f: _Facts) -> Finding:
    q = f.qmax
    rungs = sorted(q.rungs, key=lambda r: r.concurrency)
    usable = [r for r in rungs if r.usable]
    unusable = [
        f"{r.concurrency} ({r.unusable_reason or 'unusable'})" for r in rungs if not r.usable
    ]
    at_qmax = [r for r in usable if r.concurrency == f.q_max and r.meets_slo]
    facts = (
        f"Q_max {f.q_max} is {'bracketed' if q.q_max_bracketed else 'a lower bound'}; "
        f"{len(usable)} of {len(rungs)} rungs usable"
        + (f" (unusable: {', '.join(unusable)})" if unusable else "")
        + f"; capacity {'frozen' if q.frozen else 'NOT frozen'}; admission queue "
        f"{'unbounded' if q.unbounded_queue else 'bounded'} while measuring; run "
        f"{'complete' if q.complete else 'incomplete (' + (q.stop_reason or 'interrupted') + ')'}"
    )
    if not at_qmax or len(usable) < 2:
        return _finding(
            "measurement_trust",
            "stop",
            facts + ": Q_max does not rest on a usable passing rung and a curve of at least two "
            "usable rungs.",
            "re-run tts-bench qmax until the Q_max rung and its neighbours are usable",
        )
    failing_below = [r.concurrency for r in usable if r.concurrency < f.q_max and not r.meets_slo]
    problems = []
    if not q.q_max_bracketed:
        problems.append("no higher rung failed, so the true Q_max may be higher")
    if not q.frozen:
        problems.append("autoscaling was not frozen, so more than one instance may have served")
    if not q.complete:
        problems.append("the ladder did not finish")
    if unusable:
        problems.append("some rungs could not be judged")
    if failing_below:
        problems.append(f"rungs {failing_below} below Q_max failed the SLO (noisy measurement)")
    if problems:
        return _finding(
            "measurement_trust",
            "warn",
            facts + ": " + "; ".join(problems) + ".",
            "re-run tts-bench qmax frozen, with a ladder that reaches a failing rung",
        )
    return _finding(
        "measurement_trust", "ok", facts + ".", "none: the ladder can be trusted as measured"
    )


def _repeatability(f: _Facts) -> Finding:
    runs = [r for r in f.qmax.runs_q_max if r is not None]
    if len(f.qmax.runs_q_max) < 2:
        return _finding(
            "repeatability",
            "warn",
            f"Q_max {f.q_max} comes from one ladder: one run gives no spread, so how much Q_max "
            "moves between runs is unknown.",
            "re-run tts-bench qmax with --runs 3; the plan then uses the lowest Q_max",
        )
    missing = len(f.qmax.runs_q_max) - len(runs)
    low, high = (min(runs), max(runs)) if runs else (0, 0)
    detail = (
        f"Q_max across {len(f.qmax.runs_q_max)} runs: {f.qmax.runs_q_max} (spread {high - low}); "
        f"the plan uses {f.q_max}."
    )
    if missing or (high - low) > REPEAT_SPREAD * f.q_max or f.q_max > low:
        return _finding(
            "repeatability",
            "warn",
            detail + f" Runs disagree by more than {REPEAT_SPREAD:.0%} of Q_max, found none, or "
            "the plan's Q_max is above the lowest run.",
            "find what varies between runs (other tenants, thermal state, payload mix) and "
            "plan from the lowest Q_max",
        )
    return _finding("repeatability", "ok", detail, "none")


def _config_match(f: _Facts) -> Finding | None:
    if f.qmax.slug == f.ttotal.slug:
        return None
    return _finding(
        "config_match",
        "warn",
        f"qmax was measured on {f.qmax.slug!r} and ttotal on {f.ttotal.slug!r} "
        "(accepted by --allow-config-mismatch): T_total may not be this configuration's.",
        "re-measure ttotal on the configuration qmax measured before deploying",
    )


def _slo_budget(f: _Facts) -> Finding:
    slo_s = f.qmax.slo_ms / 1000.0
    ceiling = f.curve.ceiling_rps
    detail = (
        f"W_max = SLO - S_p95 = {slo_s:.3f} - {f.s_p95:.3f} = {f.w_max:.3f} s of queueing budget "
        f"per request; at the measured ceiling of {ceiling:.2f} completions/s an instance drains "
        f"{f.w_max * ceiling:.1f} requests within it (Q_max {f.q_max})."
    )
    if f.w_max <= 0:
        return _finding(
            "slo_budget",
            "stop",
            detail + " The service time alone uses the whole SLO.",
            "raise the SLO or make one request faster before planning a fleet",
        )
    if f.w_max < f.s_p95:
        return _finding(
            "slo_budget",
            "warn",
            detail + " Less than one service time is left for queueing: any burst breaks the SLO.",
            "raise the SLO or cut the service time",
        )
    return _finding("slo_budget", "ok", detail, "none")


def _invocation_ceiling(f: _Facts) -> Finding:
    slo_s = f.qmax.slo_ms / 1000.0
    at_qmax = [r for r in f.qmax.rungs if r.concurrency == f.q_max and r.usable]
    latency_p95_s = (at_qmax[0].latency_ms.p95 or 0.0) / 1000.0 if at_qmax else 0.0
    detail = (
        f"SLO + S_p95 = {slo_s:.3f} + {f.s_p95:.3f} = {slo_s + f.s_p95:.3f} s and p95 latency to "
        f"the last byte at Q_max {latency_p95_s:.3f} s, against SageMaker's "
        f"{INVOCATION_LIMIT_S:g} s invocation limit."
    )
    if slo_s + f.s_p95 > INVOCATION_LIMIT_S or latency_p95_s > INVOCATION_LIMIT_S:
        return _finding(
            "invocation_ceiling",
            "stop",
            detail + " Requests at Q_max would be cut off by the platform.",
            "lower the SLO, or split long texts so one invocation ends within 60 s",
        )
    if latency_p95_s > 0.8 * INVOCATION_LIMIT_S:
        return _finding(
            "invocation_ceiling",
            "warn",
            detail + " Within 20% of the limit: longer texts will be cut off.",
            "cap the text length per request",
        )
    return _finding("invocation_ceiling", "ok", detail, "none")


def _queue_bound_measured(q: QmaxArtifact) -> int | None:
    raw = q.deployed_config.container_env.get("QUEUE_MAX_DEPTH", "")
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value > 0 and not q.unbounded_queue else None


def _queue_depth(f: _Facts) -> Finding:
    bound = _queue_bound_measured(f.qmax)
    top = max(r.concurrency for r in f.qmax.rungs)
    detail = (
        f"queue_max_depth = Q_max = {f.q_max}: the container's gate answers 503 queue_saturated "
        f"beyond {f.q_max} requests in flight per instance, so no admitted request waits past "
        f"the SLO; measured with "
        + (f"QUEUE_MAX_DEPTH={bound}" if bound is not None else "no admission bound")
        + "."
    )
    if bound is not None and bound < top:
        return _finding(
            "queue_depth",
            "warn",
            detail + f" That bound is below the top rung {top}: rungs above it were shaped by "
            "the gate, not by latency.",
            "re-measure qmax with QUEUE_MAX_DEPTH unset or above the top rung",
        )
    return _finding(
        "queue_depth",
        "ok",
        detail,
        f"deploy QUEUE_MAX_DEPTH={f.q_max} (the config block's queue_max_depth)",
    )


def _threshold_units(f: _Facts) -> Finding:
    ratios = [r.cw_ratio for r in f.qmax.rungs if r.usable and r.cw_ratio]
    sagemaker = f.qmax.deployed_config.instance_type.startswith("ml.")
    if f.ratio_rung is None:
        detail = (
            "no CloudWatch/client ratio in the qmax artifact: scaling_target_value and "
            "scale_in_threshold are in client units (mean in-flight per instance, ratio taken "
            "as 1.0)."
        )
        if sagemaker:
            return _finding(
                "threshold_units",
                "warn",
                detail + " ConcurrentRequestsPerModel reports a 10-s Maximum, which can read "
                "higher than the client's mean: the policy may scale out early.",
                "re-run tts-bench qmax against the SageMaker endpoint so the ratio is joined "
                "per rung",
            )
        return _finding(
            "threshold_units",
            "ok",
            detail + " This endpoint has no CloudWatch metric, so client units are its units.",
            "measure on SageMaker before deploying there",
        )
    detail = (
        f"CloudWatch/client ratio {f.ratio:g} at rung {f.ratio_rung} (nearest C_scale_max "
        f"{f.c_max:g}): target {f.c_max:g} x {f.ratio:g}, scale-in {f.c_min:g} x {f.ratio:g} "
        "in CloudWatch units."
    )
    low, high = min(ratios), max(ratios)
    if high > (1 + RATIO_SPREAD) * low:
        return _finding(
            "threshold_units",
            "warn",
            detail + f" Ratios across rungs range {low:g}..{high:g}: the conversion depends on "
            "load.",
            "check the CloudWatch join per rung; re-measure if the metric lagged",
        )
    return _finding("threshold_units", "ok", detail, "none")


def _knee_finding(f: _Facts) -> Finding:
    curve = f.curve
    knee = knee_concurrency(curve)
    top = curve.ceiling_rps
    x_knee = curve.throughput(knee)
    x_max = f.measured_x
    x_min = curve.throughput(f.c_min)
    detail = (
        f"throughput stops growing at concurrency {knee:g} ({x_knee:.2f} completions/s, "
        f"{x_knee / top:.0%} of the {top:.2f} ceiling); at C_scale_max {f.c_max:g} an instance "
        f"completes {x_max:.2f}/s ({x_max / top:.1%}) and at C_scale_min {f.c_min:g} "
        f"{x_min:.2f}/s."
    )
    cs, xs = curve.concurrency, curve.throughput_rps
    admitted = [x for c, x in zip(cs, xs, strict=True) if knee <= c <= f.q_max]
    if len(cs) > 1 and knee == cs[-1] and xs[-1] > (1 + (1 - KNEE_SHARE)) * xs[-2]:
        return _finding(
            "knee",
            "warn",
            detail + " Throughput was still growing at the top rung: no knee was measured and "
            "the simulation holds throughput flat beyond it.",
            "extend the ladder until throughput stops growing",
        )
    if admitted and min(admitted) < COLLAPSE_SHARE * top:
        return _finding(
            "knee",
            "warn",
            detail + f" Throughput falls to {min(admitted):.2f}/s past the knee within Q_max: "
            "more concurrency costs completions.",
            "lower QUEUE_MAX_DEPTH toward the knee, or find what degrades under load",
        )
    if knee < f.c_min:
        return _finding(
            "knee",
            "warn",
            detail + " Both thresholds lie past the knee, where more requests in flight only "
            "queue: concurrency there measures backlog, not load, so the policy scales out only "
            "once instances are saturated, and the two thresholds are "
            f"{(x_max / x_min - 1):.1%} of load apart, not the {f.c_max / f.c_min - 1:.0%} the "
            "surge ratio intends.",
            "expect scale-out at saturation (see surge_survival); to scale earlier, scale on "
            f"invocations per instance near {x_knee:.1f}/s or serve more requests in parallel",
        )
    return _finding("knee", "ok", detail, "none")


def _surge_record(f: _Facts) -> dict[str, object]:
    run = f.surge_run
    start = SURGE_LEAD_S
    first_ready = min((e.ready_at_s for e in run.events if e.direction == "out"), default=None)
    last_shed = run.last_shed_s()
    return {
        "simulation": "fluid",
        "start_rps": round(f.base_rps, 3),
        "end_rps": round(f.base_rps * (1 + f.h), 3),
        "ramp_s": f.ttotal.t_total_s,
        "start_instances": f.surge_n,
        "end_instances": int(run.serving[-1]),
        "first_capacity_s": None if first_ready is None else round(first_ready - start, 1),
        "worst_ttfab_p95_ms": round(run.worst_ttfab_p95_ms, 1),
        "shed_fraction": round(run.shed_fraction(start, None), 6),
        "shed_requests": round(float(run.shed[run.time_s >= start].sum()), 1),
        "last_shed_s": None if last_shed is None else round(last_shed - start, 1),
        "peak_concurrency": round(float(run.concurrency.max()), 3),
    }


def _surge_survival(f: _Facts) -> Finding:
    run = f.surge_run
    rec = _surge_record(f)
    t_total = f.ttotal.t_total_s
    end = float(run.time_s[-1]) + run.dt_s
    shed = run.shed_fraction(SURGE_LEAD_S, None)
    last_shed = run.last_shed_s()
    recovered = last_shed is None or last_shed < end - t_total
    first = rec["first_capacity_s"]
    utilization = f.measured_x / f.curve.ceiling_rps
    detail = (
        f"simulated {f.surge_n} instances at {rec['start_rps']:g} rps rising x{1 + f.h:g} to "
        f"{rec['end_rps']:g} rps over T_total {t_total:g} s (fluid model, policy as planned, "
        f"new instances serving {f.policy.provision_s:g} s after each decision): "
        + (
            f"first new capacity {first:g} s into the surge; "
            if first is not None
            else "no scale-out was needed; "
        )
        + f"worst p95 TTFAB {rec['worst_ttfab_p95_ms']:g} ms (SLO {f.qmax.slo_ms:g}); the gate "
        f"shed {shed:.1%} of requests ({rec['shed_requests']:g}) over the surge and the "
        f"{2 * t_total:g} s after it; instances at the scale-out threshold already run at "
        f"{utilization:.1%} of their measured throughput ceiling."
    )
    if run.worst_ttfab_p95_ms > f.qmax.slo_ms or not recovered:
        why = []
        if run.worst_ttfab_p95_ms > f.qmax.slo_ms:
            why.append("admitted requests missed the SLO")
        if not recovered:
            why.append(
                f"the fleet was still shedding in the last {t_total:g} s: at max_instances "
                f"{f.max_instances} it cannot carry the peak"
            )
        return _finding(
            "surge_survival",
            "stop",
            detail + " " + "; ".join(why).capitalize() + ".",
            "shorten T_total (see provision_stage), pick a larger surge ratio, or raise the "
            "floor ahead of known surges",
        )
    if shed > 0:
        return _finding(
            "surge_survival",
            "warn",
            detail + " The fleet survives only by refusing requests until new capacity serves.",
            "accept the 503s (clients retry), or keep throughput headroom: raise min capacity "
            "ahead of known surges, shorten T_total, or scale on a signal that moves before "
            "saturation (see knee)",
        )
    return _finding("surge_survival", "ok", detail, "none")


def _scale_in_safety(f: _Facts) -> Finding:
    if f.c_max <= f.c_min:
        return _finding(
            "scale_in_safety",
            "stop",
            f"surge ratio {1 + f.h:g} puts the scale-in threshold ({f.c_min:g}) at the "
            f"scale-out threshold ({f.c_max:g}): every scale-in is followed by a scale-out.",
            "pick a surge ratio above 1",
        )
    ratio = f.c_max / f.c_min
    x_max, x_min = f.curve.throughput(f.c_max), f.curve.throughput(f.c_min)
    load = (
        f"; in load terms (measured {x_min:.2f} and {x_max:.2f} completions/s at the thresholds) "
        + (
            f"it needs N >= {math.ceil(x_max / (x_max - x_min) - 1e-9)}, since past the knee "
            "concurrency is not proportional to load"
            if x_max > x_min
            else "no fleet size is safe, since both thresholds sit at the same throughput"
        )
    )
    detail = (
        f"removing one of N instances multiplies each survivor's load by N/(N-1); scale-in "
        f"stays below the scale-out threshold only while N/(N-1) <= C_scale_max/C_scale_min = "
        f"{ratio:g}, i.e. N >= {f.min_safe}" + load + f". min_instances is {f.min_instances}."
    )
    if f.min_instances < f.min_safe:
        return _finding(
            "scale_in_safety",
            "warn",
            detail + f" Below {f.min_safe} instances a scale-in can push the survivors back "
            "over the scale-out threshold (2 -> 1 doubles the survivor's load); the "
            f"{f.policy.scale_in_cooldown_s:g} s cooldown damps that oscillation but cannot "
            "remove it.",
            f"raise --min-floor to {f.min_safe} if quiet-hour capacity is affordable",
        )
    return _finding("scale_in_safety", "ok", detail, "none")


def _fleet_cost(f: _Facts) -> Finding:
    inputs = f.inputs
    assert inputs.peak_rps is not None
    s_mean = f.qmax.s_mean_s
    naive = math.ceil(inputs.peak_rps * s_mean / f.c_max - 1e-9) if s_mean else None
    day = simulate(
        diurnal_trace(inputs.peak_rps, inputs.trough_rps, dt_s=ALARM_PERIOD_S),
        curve=f.curve,
        policy=f.policy,
        slo_ms=f.qmax.slo_ms,
        dt_s=ALARM_PERIOD_S,
    )
    detail = (
        f"an instance completes {f.measured_x:.3f} requests/s at C_scale_max {f.c_max:g} "
        f"(Little's law N / mean latency: {f.little_x:.3f}/s; sized with {f.per_instance:g}); "
        f"trough {inputs.trough_rps:g} rps needs {_instances(inputs.trough_rps, f.per_instance)}, "
        f"peak {inputs.peak_rps:g} rps needs {_instances(inputs.peak_rps, f.per_instance)}; fleet "
        f"{f.min_instances}..{f.max_instances} (floor {inputs.min_floor}); a simulated day "
        f"between trough and peak costs {day.instance_hours:.0f} instance-hours."
    )
    if naive is not None and s_mean:
        detail += (
            f" rps x S_mean / C_scale_max would give {naive} instance(s): it assumes an "
            f"instance completes C_scale_max / S_mean = {f.c_max / s_mean:.0f}/s"
            + (
                f", {f.max_instances / max(naive, 1):.0f}x too few."
                if naive < f.max_instances
                else "."
            )
        )
    gap = abs(f.measured_x - f.little_x) / max(f.measured_x, f.little_x)
    if gap > LITTLE_TOLERANCE:
        return _finding(
            "fleet_cost",
            "warn",
            detail + f" Measured throughput and Little's law disagree by {gap:.0%}: the ladder's "
            "windows or in-flight counts are suspect; the lower value sizes the fleet.",
            "re-measure qmax and check the rung windows",
        )
    if f.max_instances <= f.min_instances:
        return _finding(
            "fleet_cost",
            "warn",
            detail + " min_instances equals max_instances: there is nothing to scale, and the "
            "infra will leave autoscaling out.",
            "lower --min-floor or check --peak-rps",
        )
    return _finding(
        "fleet_cost",
        "ok",
        detail,
        "request a service quota of at least max_instances for the instance type",
    )


def _provision_stage(f: _Facts) -> Finding:
    t = f.ttotal
    durations = _stage_durations(t)
    if not durations:
        return _finding(
            "provision_stage",
            "warn",
            f"T_total {t.t_total_s:g} s has no stage timeline: what dominates it is unknown.",
            "re-run tts-bench ttotal so each stage is timed",
        )
    by_name = dict(durations)
    longest = max(durations, key=lambda d: d[1])[0]
    name = t.dominant_stage if t.dominant_stage in by_name else longest
    seconds = by_name[name]
    share = seconds / t.t_total_s
    after = sum(d for n, d in durations[[n for n, _ in durations].index(name) + 1 :])
    return _finding(
        "provision_stage",
        "ok",
        f"{name} dominates T_total: {seconds:.1f} s of {t.t_total_s:g} s ({share:.0%}); the "
        f"stages after it take {after:.1f} s; {t.policy_lag_bound_s:g} s of T_total is the "
        f"policy's detection-lag bound, not measured.",
        "a smaller image or warm capacity (warm pools) shortens T_total"
        if name in ("instance_logging", "desired_set", "in_service")
        else f"shorten {name} to shorten T_total",
    )


# --- output --------------------------------------------------------------------------------


def _inputs_record(
    qmax: QmaxArtifact, ttotal: TtotalArtifact, inputs: PlanInputs
) -> dict[str, object]:
    return {
        "slo_ms": qmax.slo_ms,
        "surge_ratio": float(inputs.surge_ratio),
        "peak_rps": float(inputs.peak_rps or 0.0),
        "trough_rps": float(inputs.trough_rps),
        "min_floor": int(inputs.min_floor),
        "allow_config_mismatch": inputs.allow_config_mismatch,
        "qmax_artifact": {
            "file": inputs.qmax_name,
            "run_id": qmax.provenance.run_id,
            "slug": qmax.slug,
            "transport": qmax.transport,
        },
        "ttotal_artifact": {
            "file": inputs.ttotal_name,
            "run_id": ttotal.provenance.run_id,
            "slug": ttotal.slug,
            "transport": ttotal.transport,
        },
    }


def _whole_or_float(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def config_block(plan: PlanArtifact, inputs: PlanInputs) -> str:
    """The paste-ready registry entry (infra/speech_infra/registry.py)."""
    slo = plan.inputs.get("slo_ms")
    ratio = repr(float(plan.cw_units_ratio))
    lines = [
        f'"{plan.model}": ModelEndpointConfig(',
        f'    model_name="{plan.model}",',
        f'    instance_type="{getattr(plan, "instance_type", "")}",',
        f"    min_instances={plan.min_instances},  # trough {inputs.trough_rps:g} rps, floor "
        f"{inputs.min_floor}; {plan.min_safe_instances} is the smallest safe floor for scale-in",
        f"    max_instances={plan.max_instances},  # peak {inputs.peak_rps:g} rps at "
        f"{plan.per_instance_rps_at_c_scale_max:g} rps per instance",
        f"    scaling_target_value={float(plan.scaling_target_value)!r},  # C_scale_max "
        f"{plan.c_scale_max:g} x CloudWatch ratio {ratio}",
        f"    scale_in_threshold={float(plan.scale_in_threshold)!r},  # C_scale_min "
        f"{plan.c_scale_min:g} x CloudWatch ratio {ratio}",
        f"    ttfab_slo_ms={_whole_or_float(slo) if isinstance(slo, int | float) else slo},",
        f"    queue_max_depth={plan.queue_max_depth},  # the container's admission bound = Q_max",
        f"    scale_out_cooldown_s={plan.scale_out_cooldown_s},",
        f"    scale_in_cooldown_s={plan.scale_in_cooldown_s},",
        "),",
    ]
    return "\n".join(lines)


def report_lines(plan: PlanArtifact) -> list[str]:
    """The human report: thresholds, cooldowns, fleet and findings."""
    inputs = plan.inputs
    width = 33
    rows = [
        (
            "scaling_target_value",
            f"{plan.scaling_target_value:.3f} (C_scale_max "
            f"{plan.c_scale_max:g} x ratio {plan.cw_units_ratio:g})",
        ),
        (
            "scale_in_threshold",
            f"{plan.scale_in_threshold:.3f} (C_scale_min "
            f"{plan.c_scale_min:g} x ratio {plan.cw_units_ratio:g})",
        ),
        ("w_max_s", f"{plan.w_max_s:.3f} (SLO - S_p95)"),
        ("queue_max_depth", f"{plan.queue_max_depth} (Q_max)"),
        ("first_chunk_alarm_ms", f"{plan.first_chunk_alarm_ms:g} (p95 TTFAB at concurrency 1)"),
        ("scale_out_cooldown_s", f"{plan.scale_out_cooldown_s}"),
        ("scale_in_cooldown_s", f"{plan.scale_in_cooldown_s}"),
        ("per_instance_rps_at_c_scale_max", f"{plan.per_instance_rps_at_c_scale_max:g}"),
        (
            "min_instances",
            f"{plan.min_instances} (trough {inputs.get('trough_rps')} rps, "
            f"floor {inputs.get('min_floor')})",
        ),
        ("max_instances", f"{plan.max_instances} (peak {inputs.get('peak_rps')} rps)"),
        ("min_safe_instances", f"{plan.min_safe_instances}"),
    ]
    lines = [
        f"plan for {plan.model} on {plan.slug}: SLO {inputs.get('slo_ms')} ms, surge ratio "
        f"{inputs.get('surge_ratio')}",
        *(f"{name:<{width}}: {value}" for name, value in rows),
        "findings:",
    ]
    for finding in plan.findings:
        lines.append(f"  {finding.name:<20} {finding.verdict:<5} {finding.detail}")
        if finding.verdict != "ok" and finding.recommendation:
            lines.append(f"  {'':<20} {'':<5} -> {finding.recommendation}")
    lines.append(f"verdict: {plan.verdict}")
    return lines
