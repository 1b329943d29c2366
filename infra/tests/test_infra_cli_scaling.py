"""`speech-infra deploy` says up front whether the endpoint gets autoscaling, and why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from speech_infra.cli import main

ROOT = Path(__file__).resolve().parents[2]
SOURCE_PLAN = ROOT / "reports" / "examples" / "source" / "plan-kokoro-82m.json"


def deploy_dry_run(capsys: pytest.CaptureFixture[str], artifacts_dir: Path) -> tuple[int, str]:
    context = ["--context", f"artifacts_dir={artifacts_dir}"]
    code = main(["deploy", "kokoro-82m", "--dry-run", "--cdk", "cdk", *context])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_without_a_plan_deploy_says_there_is_no_autoscaling(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = deploy_dry_run(capsys, tmp_path)
    assert code == 0
    assert f"no plan at {tmp_path / 'plan-kokoro-82m.json'}" in out
    assert "the endpoint deploys without autoscaling" in out


def test_with_a_plan_deploy_names_the_policy_it_will_get(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shutil.copy(SOURCE_PLAN, tmp_path / SOURCE_PLAN.name)
    code, out = deploy_dry_run(capsys, tmp_path)
    assert code == 0
    assert "autoscaling from" in out
    assert "target 37.5" in out
    assert "without autoscaling" not in out


def test_a_broken_plan_stops_deploy_before_any_step(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "plan-kokoro-82m.json").write_text("{not json")
    code, out = deploy_dry_run(capsys, tmp_path)
    assert code == 2
    assert "not JSON" in out
    assert "cdk deploy" not in out
