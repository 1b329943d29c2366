"""`python app.py` in infra/, as the CDK CLI runs it: CDK_OUTDIR and CDK_CONTEXT_JSON only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from infra_helpers import MODEL, of_type, start_app, templates, write_plan

from tests.factories import make_plan


@dataclass
class AppRun:
    outdir: Path
    returncode: int
    stderr: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AppRun]:
    """Both runs at once (each is mostly Node start-up): without a plan, and with one."""
    reports = tmp_path_factory.mktemp("app-reports")
    write_plan(
        reports,
        make_plan(
            scaling_target_value=37.5,
            scale_in_threshold=25.0,
            min_instances=1,
            max_instances=29,
            scale_out_cooldown_s=30,
            scale_in_cooldown_s=960,
        ),
    )
    inputs = {"without_plan": tmp_path_factory.mktemp("no-reports"), "with_plan": reports}
    workdirs = {name: tmp_path_factory.mktemp(f"app-{name}") for name in inputs}
    started = {name: start_app(workdirs[name], inputs[name]) for name in inputs}
    return {
        name: AppRun(
            outdir=workdirs[name] / "out",
            returncode=process.wait(timeout=300),
            stderr=(workdirs[name] / "stderr.txt").read_text(),
        )
        for name, process in started.items()
    }


def test_without_a_plan_three_stacks_and_no_scalable_target(runs: dict[str, AppRun]) -> None:
    result = runs["without_plan"]
    outdir = result.outdir
    assert result.returncode == 0, result.stderr[-3000:]
    written = templates(outdir)
    assert len(written) >= 3
    assert {
        "SpeechFoundationStack",
        "SpeechModelCacheStack",
        f"SpeechEndpointStack-{MODEL}",
    } <= set(written)
    assert of_type(written, "AWS::ApplicationAutoScaling::ScalableTarget") == []
    assert of_type(written, "AWS::ApplicationAutoScaling::ScalingPolicy") == []
    assert f"{MODEL}: autoscaling left out: no plan at " in result.stderr
    assert "(run tts-bench plan)" in result.stderr


def test_with_a_plan_the_templates_carry_its_values(runs: dict[str, AppRun]) -> None:
    result = runs["with_plan"]
    outdir = result.outdir
    assert result.returncode == 0, result.stderr[-3000:]
    written = templates(outdir)
    assert len(written) >= 3
    (target,) = of_type(written, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 29)
    policies = {
        p["PolicyType"]: p for p in of_type(written, "AWS::ApplicationAutoScaling::ScalingPolicy")
    }
    tracking = policies["TargetTrackingScaling"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["TargetValue"] == 37.5
    assert tracking["ScaleOutCooldown"] == 30
    assert tracking["DisableScaleIn"] is True
    step = policies["StepScaling"]["StepScalingPolicyConfiguration"]
    assert step["Cooldown"] == 960
    scale_in = [
        a for a in of_type(written, "AWS::CloudWatch::Alarm") if a["AlarmName"].endswith("-ScaleIn")
    ]
    assert [a["Threshold"] for a in scale_in] == [25]
    assert f"{MODEL}: autoscaling from " in result.stderr
