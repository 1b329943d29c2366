"""`pytest -m plan`: derive the policy from the qmax and ttotal artifacts and gate on it.

    pytest -m plan --tts-qmax-artifact reports/qmax-….json \
        --tts-ttotal-artifact reports/ttotal-….json --tts-peak-rps 5000 --tts-trough-rps 10

Repeat both artifact options, one pair per instance type, with --tts-prices FILE to weigh them
by cost: the plan is the cheapest that meets the SLO and the surge rule.

Offline: reads the artifacts, writes ``plan-{model}.json`` to --tts-artifacts-dir, shows the
findings and the simulated surge in the HTML report, and fails when any finding is a stop.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.failures import one_line
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.report.extras import ReportExtras, render

pytestmark = pytest.mark.plan


def test_plan_has_no_stop_findings(
    tts_options: RunOptions, tts_report: ReportExtras, tts_summary: list[str]
) -> None:
    from pytest_tts_scaling.core.plan.render import candidate_lines
    from pytest_tts_scaling.steps.plan import PlanStepInputs, run_plan
    from pytest_tts_scaling.steps.tracking import record_plan

    with one_line("plan", tts_summary):
        inputs = PlanStepInputs.from_options(tts_options)
        result = run_plan(inputs)
    plan, path = result.plan, result.path
    tts_summary.extend(f"plan: {line}" for line in result.kept)
    tts_summary.extend(record_plan(result, inputs.tracking))
    tts_report.artifact(plan, path, result.outcome)
    tts_report.html(render("plan.html.j2", plan=plan), name="plan findings and ModelEndpointConfig")
    tts_summary.append(
        f"plan {plan.verdict}: target {plan.scaling_target_value:g}, scale-in "
        f"{plan.scale_in_threshold:g}, cooldowns {plan.scale_out_cooldown_s}/"
        f"{plan.scale_in_cooldown_s} s, instances {plan.min_instances}..{plan.max_instances}, "
        f"queue_max_depth {plan.queue_max_depth}; written to {path}"
    )
    tts_summary.extend(f"plan: {line}" for line in candidate_lines(plan))
    tts_summary.extend(
        f"plan {f.verdict}: {f.name}: {f.recommendation}"
        for f in plan.findings
        if f.verdict != "ok"
    )
    assert not result.stops, "plan verdict stop: " + "; ".join(
        f"{f.name}: {f.detail} Recommendation: {f.recommendation}" for f in result.stops
    )
