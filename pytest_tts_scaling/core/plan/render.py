"""The plan as text: the paste-ready registry block and the lines `tts-bench plan` prints. Pure."""

from __future__ import annotations

from pytest_tts_scaling.core.plan.inputs import PlanInputs
from pytest_tts_scaling.core.schema import (
    ArtifactRef,
    PlanArtifact,
    PlanInputsRecord,
    QmaxArtifact,
    TtotalArtifact,
)


def inputs_record(
    qmax: QmaxArtifact, ttotal: TtotalArtifact, inputs: PlanInputs
) -> PlanInputsRecord:
    return PlanInputsRecord(
        slo_ms=qmax.slo_ms,
        surge_ratio=float(inputs.surge_ratio),
        peak_rps=float(inputs.peak_rps or 0.0),
        trough_rps=float(inputs.trough_rps),
        min_floor=int(inputs.min_floor),
        allow_config_mismatch=inputs.allow_config_mismatch,
        hourly_rps=list(inputs.hourly_rps) if inputs.hourly_rps is not None else None,
        qmax_artifact=ArtifactRef(
            file=inputs.qmax_name,
            run_id=qmax.provenance.run_id,
            slug=qmax.slug,
            transport=qmax.transport,
            weights=qmax.deployed_config.weights,
        ),
        ttotal_artifact=ArtifactRef(
            file=inputs.ttotal_name,
            run_id=ttotal.provenance.run_id,
            slug=ttotal.slug,
            transport=ttotal.transport,
            weights=ttotal.weights,
        ),
    )


def _whole_or_float(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def config_block(plan: PlanArtifact, inputs: PlanInputs) -> str:
    """The paste-ready registry entry (infra/speech_infra/registry.py)."""
    slo = plan.inputs.slo_ms
    ratio = repr(float(plan.cw_units_ratio))
    lines = [
        f'"{plan.model}": ModelEndpointConfig(',
        f'    model_name="{plan.model}",',
        f'    instance_type="{plan.instance_type or ""}",',
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
            f"{plan.min_instances} (trough {inputs.trough_rps} rps, floor {inputs.min_floor})",
        ),
        ("max_instances", f"{plan.max_instances} (peak {inputs.peak_rps} rps)"),
        ("min_safe_instances", f"{plan.min_safe_instances}"),
    ]
    lines = [
        f"plan for {plan.model} on {plan.slug}: SLO {inputs.slo_ms} ms, surge ratio "
        f"{inputs.surge_ratio}",
        *(f"{name:<{width}}: {value}" for name, value in rows),
        "findings:",
    ]
    for finding in plan.findings:
        lines.append(f"  {finding.name:<20} {finding.verdict:<5} {finding.detail}")
        if finding.verdict != "ok" and finding.recommendation:
            lines.append(f"  {'':<20} {'':<5} -> {finding.recommendation}")
    lines.extend(candidate_lines(plan))
    lines.append(f"verdict: {plan.verdict}")
    return lines


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def _per_audio_hour(value: float | None) -> str:
    """Cents matter here: an audio hour can cost less than one."""
    return "n/a" if value is None else f"{value:.4g}"


def candidate_lines(plan: PlanArtifact) -> list[str]:
    """The instance types weighed, side by side: fleet, cost, cost per audio hour, and why each
    lost (none for a plan of one unpriced candidate)."""
    if not plan.candidates:
        return []
    prices = plan.inputs.prices
    currency = prices.currency if prices else ""
    said = [
        f"prices {prices.file}" if prices and prices.file else None,
        prices.region if prices else None,
        f"as of {prices.as_of}" if prices and prices.as_of else None,
    ]
    day = "of the hourly profile" if plan.inputs.hourly_rps else "between trough and peak"
    header = (
        f"{'':2}{'instance type':<16} {'Q_max':>5} {'rps/inst':>9} {'fleet':>11} "
        f"{'price/h':>8} {'peak/h':>10} {'trough/h':>9} {'per day':>11} {'/audio h':>8} verdict"
    )
    lines = [
        f"candidates ({currency} per hour at peak and trough, per day {day}, per audio hour; "
        f"{', '.join(s for s in said if s)}):",
        header,
    ]
    for c in plan.candidates:
        lines.append(
            f"{'* ' if c.chosen else '  '}{c.instance_type:<16} {c.q_max:>5} "
            f"{c.per_instance_rps_at_c_scale_max:>9.3f} "
            f"{f'{c.min_instances}..{c.max_instances}':>11} {c.price_per_hour:>8.4g} "
            f"{_money(c.cost_per_hour_at_peak):>10} {_money(c.cost_per_hour_at_trough):>9} "
            f"{_money(c.cost_per_day):>11} {_per_audio_hour(c.cost_per_audio_hour):>8} {c.verdict}"
        )
        lines.append(f"{'':4}{c.why}")
    return lines
