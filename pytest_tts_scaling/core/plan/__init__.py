"""The plan (docs/steps.md#plan): thresholds, cooldowns, fleet size and findings from the two
measurements.

Pure: a qmax artifact, a ttotal artifact and the operator's inputs in, a :class:`PlanArtifact`
out; no I/O, no clock, no randomness, so the same inputs give the same bytes. Refusals raise
:mod:`pytest_tts_scaling.errors` exceptions whose one-line message names what differs.

Where the published method (the blog post docs/method.md names) is wrong, the plan follows the
measurement instead: the fleet is sized
from the throughput the ladder measured at C_scale_max, never from ``rps * S_mean / C_scale_max``
(on an instance that serves one request at a time that undercounts the fleet many times over),
and surge survival is decided by simulating the fleet (:mod:`pytest_tts_scaling.core.simulate`).

The package follows the plan's seams: `inputs` (the operator's inputs and the refusals),
`quantities`, `findings` (about the measurement), `policy` (findings about the policy) and
`render` (the registry block and the printed lines); `compute_plan` here puts them together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from pytest_tts_scaling.core.autoscaler import Policy
from pytest_tts_scaling.core.curve import ServiceCurve
from pytest_tts_scaling.core.plan.findings import (
    Facts,
    config_match,
    invocation_ceiling,
    measurement_trust,
    queue_depth,
    repeatability,
    slo_budget,
)
from pytest_tts_scaling.core.plan.inputs import (
    ALARM_PERIOD_S,
    ALARM_PERIODS,
    SURGE_LEAD_S,
    PlanInputs,
    check_inputs,
    label,
    little_curve,
    measured_curve,
)
from pytest_tts_scaling.core.plan.policy import (
    fleet_cost,
    knee_finding,
    provision_stage,
    scale_in_safety,
    surge_record,
    surge_survival,
    threshold_units,
)
from pytest_tts_scaling.core.plan.quantities import (
    cw_ratio_near,
    fleet_size,
    knee_concurrency,
    smallest_safe_floor,
)
from pytest_tts_scaling.core.plan.render import config_block, inputs_record, report_lines
from pytest_tts_scaling.core.schema import (
    Finding,
    PlanArtifact,
    PlanCurve,
    PlanPolicy,
    QmaxArtifact,
    TtotalArtifact,
    Verdict,
)
from pytest_tts_scaling.core.simulate import SimulationResult, simulate, surge_trace
from pytest_tts_scaling.errors import ArtifactError


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
    """Every plan quantity (docs/steps.md#plan), the findings and the verdict. Raises InputError
    subclasses."""
    check_inputs(qmax, ttotal, inputs)
    facts = _facts(qmax, ttotal, inputs)
    artifact = _plan_artifact(facts, all_findings(facts))
    return PlanOutcome(
        artifact, facts.curve, facts.policy, facts.surge_run, SURGE_LEAD_S, facts.surge_n
    )


def _facts(qmax: QmaxArtifact, ttotal: TtotalArtifact, inputs: PlanInputs) -> Facts:
    """The plan's quantities, its policy and the fleet simulated through the surge."""
    # Established by check_inputs:
    assert qmax.q_max is not None
    assert qmax.s_p95_s is not None
    assert inputs.peak_rps is not None
    q_max = qmax.q_max
    t_total = ttotal.t_total_s
    curve = measured_curve(qmax, inputs.qmax_name)

    surge = Fraction(repr(float(inputs.surge_ratio)))
    h = surge - 1
    c_max = (1 - h) * q_max
    c_min = (1 - 2 * h) * q_max
    ratio, ratio_rung = cw_ratio_near(qmax.rungs, float(c_max))

    measured_x = curve.throughput(float(c_max))
    little_x = little_curve(qmax.rungs, inputs.qmax_name).throughput(float(c_max))
    per_instance = round(min(measured_x, little_x), 3)
    if per_instance <= 0:
        raise ArtifactError(
            f"{label(inputs.qmax_name, 'qmax artifact')}: field 'rungs': no throughput measured "
            f"at or below C_scale_max {float(c_max):g}"
        )
    min_instances = max(inputs.min_floor, fleet_size(inputs.trough_rps, per_instance))
    max_instances = max(min_instances, fleet_size(inputs.peak_rps, per_instance))

    policy = Policy(
        target_concurrency=float(c_max),
        scale_in_concurrency=float(c_min),
        min_instances=min_instances,
        max_instances=max_instances,
        scale_out_cooldown_s=int(min(max(t_total / 2, 10.0), 30.0)),
        scale_in_cooldown_s=int(max(300.0, 3 * t_total)),
        provision_s=max(0.0, t_total - ttotal.policy_lag_bound_s),
        queue_max_depth=q_max,
        period_s=ALARM_PERIOD_S,
        scale_out_periods=ALARM_PERIODS,
        scale_in_periods=ALARM_PERIODS,
    )
    base_rps = inputs.peak_rps / float(surge)
    surge_n = min(max_instances, max(min_instances, fleet_size(base_rps, per_instance)))
    surge_run = simulate(
        surge_trace(
            base_rps, float(surge), lead_s=SURGE_LEAD_S, ramp_s=t_total, hold_s=2 * t_total
        ),
        curve=curve,
        policy=policy,
        slo_ms=qmax.slo_ms,
        initial_instances=surge_n,
    )
    return Facts(
        qmax=qmax,
        ttotal=ttotal,
        inputs=inputs,
        curve=curve,
        h=float(h),
        c_max=float(c_max),
        c_min=float(c_min),
        ratio=ratio,
        ratio_rung=ratio_rung,
        w_max=max(0.0, qmax.slo_ms / 1000.0 - qmax.s_p95_s),
        measured_x=measured_x,
        little_x=little_x,
        per_instance=per_instance,
        min_instances=min_instances,
        max_instances=max_instances,
        min_safe=smallest_safe_floor(c_max, c_min, max_instances),
        policy=policy,
        surge_run=surge_run,
        surge_n=surge_n,
        base_rps=base_rps,
    )


def _plan_artifact(f: Facts, findings: list[Finding]) -> PlanArtifact:
    """The plan artifact from its facts; the registry entry is written from its own fields."""
    # Established by check_inputs:
    assert f.qmax.q_max is not None
    assert f.qmax.ttfab_p95_at_c1_ms is not None
    artifact = PlanArtifact(
        model=f.qmax.model,
        slug=f.qmax.slug,
        inputs=inputs_record(f.qmax, f.ttotal, f.inputs),
        c_scale_max=round(f.c_max, 6),
        c_scale_min=round(f.c_min, 6),
        cw_units_ratio=f.ratio,
        scaling_target_value=round(f.c_max * f.ratio, 3),
        scale_in_threshold=round(f.c_min * f.ratio, 3),
        w_max_s=round(f.w_max, 3),
        queue_max_depth=f.qmax.q_max,
        scale_out_cooldown_s=int(f.policy.scale_out_cooldown_s),
        scale_in_cooldown_s=int(f.policy.scale_in_cooldown_s),
        min_instances=f.min_instances,
        max_instances=f.max_instances,
        min_safe_instances=f.min_safe,
        per_instance_rps_at_c_scale_max=f.per_instance,
        first_chunk_alarm_ms=float(math.ceil(round(f.qmax.ttfab_p95_at_c1_ms, 6))),
        findings=findings,
        verdict=overall_verdict(findings),
        config_block="",
        **_extras(f),
    )
    return artifact.model_copy(update={"config_block": config_block(artifact, f.inputs)})


def _extras(f: Facts) -> dict[str, Any]:
    """The plan's optional fields: what the report and the config block need."""
    return {
        "instance_type": f.qmax.deployed_config.instance_type,
        "t_total_s": f.ttotal.t_total_s,
        "knee_concurrency": knee_concurrency(f.curve),
        "surge_simulation": surge_record(f),
        "service_curve": PlanCurve(
            concurrency=list(f.curve.concurrency),
            throughput_rps=list(f.curve.throughput_rps),
            ttfab_p95_ms=list(f.curve.ttfab_p95_ms),
        ),
        "policy": PlanPolicy(**asdict(f.policy)),
    }


def stored_outcome(plan: PlanArtifact) -> PlanOutcome | None:
    """What a schema 2 plan decided, read from it: its curve and policy as stored, and its surge
    run again from them (the simulation is deterministic), without the qmax or ttotal artifact.
    None for a plan that does not hold them (schema 1)."""
    stored, decided, surge = plan.service_curve, plan.policy, plan.surge_simulation or {}
    peak_rps, ratio, slo_ms = plan.inputs.peak_rps, plan.inputs.surge_ratio, plan.inputs.slo_ms
    start = surge.get("start_instances")
    if stored is None or decided is None or plan.t_total_s is None or not isinstance(start, int):
        return None
    if peak_rps is None or ratio is None or slo_ms is None:
        return None
    curve = ServiceCurve(
        tuple(stored.concurrency), tuple(stored.throughput_rps), tuple(stored.ttfab_p95_ms)
    )
    policy = Policy(**{name: getattr(decided, name) for name in PlanPolicy.model_fields})
    t_total = plan.t_total_s
    run = simulate(
        surge_trace(
            peak_rps / ratio, ratio, lead_s=SURGE_LEAD_S, ramp_s=t_total, hold_s=2 * t_total
        ),
        curve=curve,
        policy=policy,
        slo_ms=slo_ms,
        initial_instances=start,
    )
    return PlanOutcome(plan, curve, policy, run, SURGE_LEAD_S, start)


def overall_verdict(findings: Sequence[Finding]) -> Verdict:
    """stop if any finding stops, else warn if any warns, else ok."""
    verdicts = {f.verdict for f in findings}
    if "stop" in verdicts:
        return "stop"
    return "warn" if "warn" in verdicts else "ok"


def all_findings(f: Facts) -> list[Finding]:
    found = [
        measurement_trust(f),
        repeatability(f),
        config_match(f),
        slo_budget(f),
        invocation_ceiling(f),
        queue_depth(f),
        threshold_units(f),
        knee_finding(f),
        surge_survival(f),
        scale_in_safety(f),
        fleet_cost(f),
        provision_stage(f),
    ]
    return [finding for finding in found if finding is not None]


__all__ = [
    "ALARM_PERIODS",
    "ALARM_PERIOD_S",
    "PlanInputs",
    "PlanOutcome",
    "compute_plan",
    "config_block",
    "knee_concurrency",
    "overall_verdict",
    "report_lines",
    "stored_outcome",
]
