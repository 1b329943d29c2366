"""The promotion gate as one command, against an endpoint deployed on moto.

    pytest -m "drift or plan or validate" --endpoint NAME --plan-artifact F \
        --qmax-artifact Q --ttotal-artifact T --peak-rps R --junitxml gate.xml

It passes only when every check passes and names each check as a JUnit test case.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_tts_scaling.artifacts import save
from tests.aws.aws_helpers import deploy, make_plan, suspend, unique

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "reports" / "examples" / "source"


def cases(junit: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(junit).iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[case.get("name", "")] = "failed" if failed else "passed"
    return outcomes


@pytest.fixture
def gate(pytester: pytest.Pytester, tmp_path: Path) -> list[str]:
    """The real scenarios in a pytester directory and the gate's arguments, but --endpoint."""
    # Module names of their own: this session has imported tests' test_plan, test_drift, ….
    for name in ("drift", "plan", "validate", "qmax"):
        shutil.copy(ROOT / "scenarios" / f"test_{name}.py", pytester.path / f"test_gate_{name}.py")
    plan = save(make_plan(), tmp_path / "committed" / "plan-kokoro-82m.json")
    return [
        "-p",
        "no:cacheprovider",
        "-m",
        "drift or plan or validate",
        f"--tts-plan-artifact={plan}",
        f"--tts-qmax-artifact={EXAMPLES}/qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json",
        f"--tts-ttotal-artifact={EXAMPLES / 'ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json'}",
        "--tts-peak-rps",
        "5000",
        "--tts-trough-rps",
        "10",
        f"--tts-artifacts-dir={tmp_path / 'promotion'}",
    ]


def test_the_gate_passes_on_a_healthy_endpoint_and_fails_naming_each_check(
    aws_env: dict[str, str], pytester: pytest.Pytester, gate: list[str]
) -> None:
    healthy = deploy(unique())
    junit = pytester.path / "ok.xml"
    result = pytester.runpytest(*gate, "--endpoint", healthy.endpoint, f"--junitxml={junit}")
    outcomes = cases(junit)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert set(outcomes.values()) == {"passed"}
    assert "test_plan_has_no_stop_findings" in outcomes
    assert "test_drift[suspended_scaling]" in outcomes
    assert "test_validate[target_value]" in outcomes
    assert not any("qmax" in name for name in outcomes)
    result.stdout.fnmatch_lines(["*preflight-ok*"])

    # A deployed target value other than the plan's, and scale-out suspended: both named.
    drifted = deploy(unique(), target_value=30.0)
    suspend(drifted.resource_id, DynamicScalingOutSuspended=True)
    junit = pytester.path / "bad.xml"
    result = pytester.runpytest(*gate, "--endpoint", drifted.endpoint, f"--junitxml={junit}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = cases(junit)
    assert sorted(name for name, o in outcomes.items() if o == "failed") == [
        "test_drift[suspended_scaling]",
        "test_validate[target_value]",
    ]
    assert outcomes["test_plan_has_no_stop_findings"] == "passed"
