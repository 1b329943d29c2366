"""What the report shows for a plan: thresholds on the measured curve and the simulated surge.

A plan of schema 2 holds the curve and the policy it decided on, and is drawn from them alone. A
schema 1 plan holds numbers only; its curve and simulation are recomputed from the qmax and
ttotal artifacts it names, when they lie beside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pytest_tts_scaling.core.plan import PlanInputs, PlanOutcome, compute_plan, stored_outcome
from pytest_tts_scaling.core.schema import ArtifactRef, PlanArtifact, QmaxArtifact, TtotalArtifact
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.report.plots import figure_svg, new_figure, plot, set_title


def plan_outcome(plan: PlanArtifact, directory: Path) -> tuple[PlanOutcome | None, str | None]:
    """The outcome behind a plan artifact: what it stored (schema 2), else recomputed from the
    artifacts named in its inputs (schema 1); or why not."""
    stored = stored_outcome(plan)
    if stored is not None:
        return stored, None
    return recompute(plan, directory)


def recompute(plan: PlanArtifact, directory: Path) -> tuple[PlanOutcome | None, str | None]:
    """The outcome behind a schema 1 plan, from the artifacts named in its inputs; or why not."""
    from pytest_tts_scaling.artifacts import load

    inputs = plan.inputs
    files = {}
    for key in ("qmax_artifact", "ttotal_artifact"):
        named: ArtifactRef | None = getattr(inputs, key)
        name = named.file if named is not None else None
        if name is None or not (directory / name).is_file():
            return None, (
                f"the simulated surge and the measured curve need the {key.split('_')[0]} "
                f"artifact the plan names ({name or 'none named'}) beside it in {directory}"
            )
        files[key] = directory / name
    try:
        outcome = compute_plan(
            load(files["qmax_artifact"], QmaxArtifact),
            load(files["ttotal_artifact"], TtotalArtifact),
            PlanInputs(
                peak_rps=inputs.peak_rps,
                trough_rps=inputs.trough_rps or 0.0,
                min_floor=inputs.min_floor or 1,
                surge_ratio=inputs.surge_ratio or 1.25,
                slo_ms=inputs.slo_ms,
                allow_config_mismatch=bool(inputs.allow_config_mismatch),
                qmax_name=files["qmax_artifact"].name,
                ttotal_name=files["ttotal_artifact"].name,
            ),
        )
    except InputError as exc:
        return None, f"the plan's inputs no longer compute: {exc}"
    if outcome.artifact.model_dump() != plan.model_dump():
        return outcome, (
            "recomputing this plan from its inputs gives other numbers than the artifact holds "
            "(another tool version?): the plots show the recomputed plan"
        )
    return outcome, None


@plot
def thresholds_svg(outcome: PlanOutcome) -> str:
    """The measured per-instance curve with the plan's thresholds, knee and admission bound."""
    plan, curve = outcome.artifact, outcome.curve
    fig, ax = new_figure(14, 3.4)
    ax.plot(
        curve.concurrency, curve.throughput_rps, "o-", color="tab:purple", label="completions/s"
    )
    ax.set_xlabel("requests in flight per instance (client units)")
    ax.set_ylabel("completions / s", color="tab:purple")
    ax.set_ylim(bottom=0)
    twin = ax.twinx()
    twin.plot(curve.concurrency, curve.ttfab_p95_ms, "s--", color="tab:blue", label="p95 TTFAB")
    slo = plan.inputs.slo_ms
    if slo:
        twin.axhline(slo, color="tab:red", linestyle=":", label=f"SLO {slo:g} ms")
    twin.set_ylabel("p95 TTFAB (ms)", color="tab:blue")
    twin.set_ylim(bottom=0)
    marks = [
        (plan.c_scale_max, "tab:orange", "-", f"C_scale_max {plan.c_scale_max:g} (scale out)"),
        (plan.c_scale_min, "tab:green", "-", f"C_scale_min {plan.c_scale_min:g} (scale in)"),
        (plan.queue_max_depth, "tab:red", "--", f"queue_max_depth {plan.queue_max_depth}"),
    ]
    if plan.knee_concurrency is not None:
        knee = plan.knee_concurrency
        marks.append((knee, "tab:brown", ":", f"knee {knee:g}"))
    for x, colour, style, label in marks:
        ax.axvline(x, color=colour, linestyle=style, label=label)
    handles = ax.get_legend_handles_labels()
    twin_handles = twin.get_legend_handles_labels()
    ax.legend(
        handles[0] + twin_handles[0],
        handles[1] + twin_handles[1],
        loc="lower right",
        fontsize="small",
        ncol=2,
    )
    ax.grid(alpha=0.3)
    set_title(
        ax,
        f"plan thresholds on the measured curve: {plan.model} on {plan.slug} "
        f"({plan.per_instance_rps_at_c_scale_max:g} completions/s at C_scale_max)",
        plan,
    )
    return figure_svg(fig)


@plot
def surge_svg(outcome: PlanOutcome) -> str:
    """Arrivals against capacity and shed requests, in flight per instance, p95 TTFAB."""
    run, plan = outcome.surge, outcome.artifact
    t = run.time_s - outcome.surge_start_s
    fig, (load, conc, ttfab) = new_figure(14, 7.5, rows=3)
    capacity = run.serving * outcome.curve.sustained(plan.queue_max_depth)(plan.queue_max_depth)
    load.plot(t, run.arrival_rps, color="tab:blue", label="arrivals (rps)")
    load.plot(t, capacity, color="tab:green", label="fleet throughput ceiling (rps)")
    load.plot(t, run.shed / run.dt_s, color="tab:red", label="shed by the gate (rps)")
    load.set_ylabel("requests / s")
    load.legend(loc="upper left", fontsize="small")
    set_title(
        load,
        f"simulated surge x{plan.inputs.surge_ratio} over T_total "
        f"{plan.t_total_s if plan.t_total_s is not None else float('nan'):g} s from "
        f"{outcome.surge_instances} "
        f"instances: {plan.model} on {plan.slug}",
        plan,
    )
    conc.plot(t, run.concurrency, color="tab:purple", label="in flight per instance")
    conc.axhline(
        plan.c_scale_max,
        color="tab:orange",
        linestyle="--",
        label=f"C_scale_max {plan.c_scale_max:g}",
    )
    conc.axhline(
        plan.queue_max_depth,
        color="tab:red",
        linestyle=":",
        label=f"queue_max_depth {plan.queue_max_depth}",
    )
    twin = conc.twinx()
    fleet = run.serving + run.provisioning
    twin.step(t, fleet, where="post", color="tab:gray", alpha=0.6, linewidth=3)
    twin.step(t, run.serving, where="post", color="tab:green", alpha=0.8)
    twin.set_ylim(float(fleet.min()) * 0.95 - 0.5, float(fleet.max()) * 1.05 + 0.5)
    twin.set_ylabel("instances (grey: incl. provisioning)")
    conc.set_ylabel("concurrency")
    conc.legend(loc="upper left", fontsize="small")
    ttfab.plot(t, run.ttfab_p95_ms, color="tab:blue", label="p95 TTFAB (ms)")
    ttfab.axhline(run.slo_ms, color="tab:red", linestyle="--", label=f"SLO {run.slo_ms:g} ms")
    ttfab.set_ylim(0, max(float(np.max(run.ttfab_p95_ms)), run.slo_ms) * 1.1)
    ttfab.set_ylabel("ms")
    ttfab.set_xlabel("seconds since the surge began")
    ttfab.legend(loc="upper left", fontsize="small")
    for axis in (load, conc, ttfab):
        axis.grid(alpha=0.3)
        for event in run.events:
            if event.direction == "out":
                axis.axvline(event.at_s - outcome.surge_start_s, color="tab:orange", alpha=0.3)
                axis.axvline(event.ready_at_s - outcome.surge_start_s, color="tab:green", alpha=0.3)
    return figure_svg(fig)
