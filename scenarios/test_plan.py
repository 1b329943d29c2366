"""`pytest -m plan`: derive the policy from the qmax and ttotal artifacts and gate on it.

    pytest -m plan --qmax-artifact reports/qmax-….json --ttotal-artifact reports/ttotal-….json \
        --peak-rps 5000 --trough-rps 10

Offline: reads two artifacts, writes ``plan-{model}.json`` to --artifacts-dir, shows the findings
and the simulated surge in the HTML report, and fails when any finding is a stop.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.report.extras import ReportExtras, render

pytestmark = pytest.mark.plan


def test_plan_has_no_stop_findings(
    tts_options: RunOptions, tts_report: ReportExtras, tts_summary: list[str]
) -> None:
    from pytest_tts_scaling.artifacts import kept_lines, load, save_keeping
    from pytest_tts_scaling.core.plan import compute_plan, inputs_from_options
    from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact, plan_filename
    from pytest_tts_scaling.errors import InputError

    missing = [
        flag
        for flag, path in (
            ("--qmax-artifact FILE", tts_options.qmax_artifact),
            ("--ttotal-artifact FILE", tts_options.ttotal_artifact),
        )
        if path is None
    ]
    if missing:
        pytest.fail(
            f"plan needs {' and '.join(missing)}: the artifacts of `pytest -m qmax` and "
            "`pytest -m ttotal` (see --artifacts-dir, default reports/)",
            pytrace=False,
        )
    assert tts_options.qmax_artifact is not None
    assert tts_options.ttotal_artifact is not None
    try:
        outcome = compute_plan(
            load(tts_options.qmax_artifact, QmaxArtifact),
            load(tts_options.ttotal_artifact, TtotalArtifact),
            inputs_from_options(tts_options),
        )
    except InputError as exc:
        pytest.fail(f"plan refused its inputs: {exc}", pytrace=False)
    plan = outcome.artifact
    path = tts_options.artifacts_dir / plan_filename(plan.model)
    tts_summary.extend(f"plan: {line}" for line in kept_lines(save_keeping(plan, path)))
    tts_report.artifact(plan, path, outcome)
    tts_report.html(render("plan.html.j2", plan=plan), name="plan findings and ModelEndpointConfig")
    tts_summary.append(
        f"plan {plan.verdict}: target {plan.scaling_target_value:g}, scale-in "
        f"{plan.scale_in_threshold:g}, cooldowns {plan.scale_out_cooldown_s}/"
        f"{plan.scale_in_cooldown_s} s, instances {plan.min_instances}..{plan.max_instances}, "
        f"queue_max_depth {plan.queue_max_depth}; written to {path}"
    )
    tts_summary.extend(
        f"plan {f.verdict}: {f.name}: {f.recommendation}"
        for f in plan.findings
        if f.verdict != "ok"
    )
    stops = [f for f in plan.findings if f.verdict == "stop"]
    assert not stops, "plan verdict stop: " + "; ".join(
        f"{f.name}: {f.detail} Recommendation: {f.recommendation}" for f in stops
    )
