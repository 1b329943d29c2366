"""The real `tts-bench` console script and the drift/validate scenarios, against moto."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from pytest_tts_scaling.artifacts import save
from tests.aws.aws_helpers import ALL_FALSE, deploy, make_plan, suspend, suspended, teardown, unique

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def bench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "tts-bench"), *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def kokoro(aws_env: dict[str, str]) -> Iterator[str]:
    """`speech-kokoro-82m` with a scalable target and a target-tracking policy, nothing else."""
    name = "speech-kokoro-82m"
    teardown(name)
    deploy(name, step=False, first_chunk_alarm=False)
    yield name
    teardown(name)


def test_drift_suspend_thaw_thaw(aws_env: dict[str, str], kokoro: str, tmp_path: Path) -> None:
    where = ("--artifacts-dir", str(tmp_path))
    ok = bench(aws_env, "drift", "--endpoint", kokoro, "--model", "kokoro-82m", *where)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines() == ["preflight-ok"]

    resource = f"endpoint/{kokoro}/variant/AllTraffic"
    suspend(resource, DynamicScalingOutSuspended=True)
    failed = bench(aws_env, "drift", "--model", "kokoro-82m", *where)  # endpoint: speech-MODEL
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"error: suspended_scaling: {resource}: DynamicScalingOutSuspended = true" in (
        failed.stdout
    )
    assert "preflight-ok" not in failed.stdout

    for _ in range(2):
        thawed = bench(aws_env, "thaw", "--endpoint", kokoro, *where)
        assert thawed.returncode == 0, thawed.stdout + thawed.stderr
        assert suspended(resource) == ALL_FALSE
    assert "not suspended, left alone" in thawed.stdout

    again = bench(aws_env, "drift", "--endpoint", kokoro, *where)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1] == "preflight-ok"


def test_drift_of_an_unknown_endpoint_fails(aws_env: dict[str, str], tmp_path: Path) -> None:
    result = bench(aws_env, "drift", "--endpoint", unique("gone"), "--artifacts-dir", str(tmp_path))
    assert result.returncode == 1
    assert "error: endpoint_status:" in result.stdout


def test_validate_exit_codes(aws_env: dict[str, str], tmp_path: Path) -> None:
    d = deploy(unique())
    plan = save(make_plan(), tmp_path / "plan-kokoro-82m.json")
    ok = bench(aws_env, "validate", "--endpoint", d.endpoint, "--plan-artifact", str(plan))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "validate-ok: 16 fields match the plan"

    # The plan found in --artifacts-dir by model name, and a mismatch.
    save(make_plan(scale_in_cooldown_s=600), plan)
    bad = bench(aws_env, "validate", "--endpoint", d.endpoint, "--artifacts-dir", str(tmp_path))
    assert bad.returncode == 1
    assert "MISMATCH scale_in_cooldown_s: deployed 960, planned 600" in bad.stdout

    missing = bench(
        aws_env, "validate", "--endpoint", d.endpoint, "--plan-artifact", str(tmp_path / "x")
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0
    assert "no such artifact file" in missing.stderr


def test_thaw_requires_an_endpoint(aws_env: dict[str, str]) -> None:
    result = bench(aws_env, "thaw")
    assert result.returncode == 2
    assert "--endpoint" in result.stderr


def test_missing_region_is_a_one_line_error(aws_env: dict[str, str], tmp_path: Path) -> None:
    env = {k: v for k, v in aws_env.items() if k not in {"AWS_REGION", "AWS_DEFAULT_REGION"}}
    result = bench(env, "drift", "--endpoint", "speech-x", "--artifacts-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "tts-bench drift: error: no AWS region configured: expected AWS_DEFAULT_REGION or a "
        "profile with a region (boto3's standard configuration)"
    )


def scenario(env: dict[str, str], tmp_path: Path, marker: str, *args: str) -> dict[str, str]:
    """Run one scenario file under pytest; return {test case name: outcome}."""
    junit = tmp_path / f"{marker}.xml"
    result = subprocess.run(
        [
            str(BIN / "python"),
            "-m",
            "pytest",
            str(ROOT / "scenarios" / f"test_{marker}.py"),
            "-m",
            marker,
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "-q",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert junit.exists(), result.stdout + result.stderr
    outcomes = {}
    for case in ET.parse(junit).iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[case.get("name", "")] = "failed" if failed else "passed"
    return outcomes


def test_drift_scenario_names_each_check(aws_env: dict[str, str], tmp_path: Path) -> None:
    d = deploy(unique())
    args = ("--endpoint", d.endpoint, f"--tts-artifacts-dir={tmp_path}")
    outcomes = scenario(aws_env, tmp_path, "drift", *args)
    assert len(outcomes) == 10
    assert set(outcomes.values()) == {"passed"}, outcomes
    suspend(d.resource_id, DynamicScalingOutSuspended=True)
    outcomes = scenario(aws_env, tmp_path, "drift", *args)
    assert [name for name, o in outcomes.items() if o == "failed"] == [
        "test_drift[suspended_scaling]"
    ]


def test_validate_scenario_names_each_field(aws_env: dict[str, str], tmp_path: Path) -> None:
    d = deploy(unique(), target_value=30.0)
    plan = save(make_plan(), tmp_path / "plan.json")
    outcomes = scenario(
        aws_env, tmp_path, "validate", "--endpoint", d.endpoint, f"--tts-plan-artifact={plan}"
    )
    assert len(outcomes) == 16
    assert [name for name, o in outcomes.items() if o == "failed"] == [
        "test_validate[target_value]"
    ]
