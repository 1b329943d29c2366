"""What the HTML report shows for a plan: the findings table and the simulated surge."""

from __future__ import annotations

from html import escape

import numpy as np

from pytest_tts_scaling.plan import PlanOutcome
from pytest_tts_scaling.report import _figure_png, _pyplot
from pytest_tts_scaling.schema import PlanArtifact

_VERDICT_COLOURS = {"ok": "#2e7d32", "warn": "#ef6c00", "stop": "#c62828"}


def findings_table_html(plan: PlanArtifact) -> str:
    """One row per finding: name, verdict, detail and recommendation."""
    rows = "".join(
        "<tr>"
        f"<td>{escape(f.name)}</td>"
        f'<td style="color:{_VERDICT_COLOURS[f.verdict]};font-weight:bold">{f.verdict}</td>'
        f"<td>{escape(f.detail)}</td>"
        f"<td>{escape(f.recommendation)}</td>"
        "</tr>"
        for f in plan.findings
    )
    return (
        f"<p>plan for <b>{escape(plan.model)}</b> on {escape(plan.slug)}: verdict "
        f'<b style="color:{_VERDICT_COLOURS[plan.verdict]}">{plan.verdict}</b>; target '
        f"{plan.scaling_target_value:g}, scale-in {plan.scale_in_threshold:g}, cooldowns "
        f"{plan.scale_out_cooldown_s}/{plan.scale_in_cooldown_s} s, instances "
        f"{plan.min_instances}..{plan.max_instances}, queue_max_depth {plan.queue_max_depth}</p>"
        '<table border="1" cellpadding="4" style="border-collapse:collapse">'
        "<tr><th>finding</th><th>verdict</th><th>detail</th><th>recommendation</th></tr>"
        f"{rows}</table>"
    )


def surge_png(outcome: PlanOutcome) -> bytes:
    """Arrivals against capacity, concurrency per instance, and p95 TTFAB through the surge."""
    plt = _pyplot()
    run, plan = outcome.surge, outcome.artifact
    t = run.time_s - outcome.surge_start_s
    fig, (load, conc, ttfab) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    capacity = run.serving * outcome.curve.sustained(plan.queue_max_depth)(plan.queue_max_depth)
    load.plot(t, run.arrival_rps, color="tab:blue", label="arrivals (rps)")
    load.plot(t, capacity, color="tab:green", label="fleet throughput ceiling (rps)")
    load.plot(t, run.shed / run.dt_s, color="tab:red", label="shed by the gate (rps)")
    load.set_ylabel("requests / s")
    load.legend(loc="upper left", fontsize="small")
    load.set_title(
        f"{plan.model}: surge x{plan.inputs.get('surge_ratio')} over T_total "
        f"{getattr(plan, 't_total_s', float('nan')):g} s from {outcome.surge_instances} instances"
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
    twin.step(
        t, run.serving + run.provisioning, where="post", color="tab:gray", alpha=0.6, linewidth=3
    )
    twin.step(t, run.serving, where="post", color="tab:green", alpha=0.8)
    fleet = run.serving + run.provisioning
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
    return _figure_png(fig)
