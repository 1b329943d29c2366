"""A frozen run stopped by SIGTERM, SIGINT or SIGKILL, in a real subprocess against moto."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aws_helpers import deploy, desired_count, suspended, unique

from pytest_tts_scaling.aws.freeze import snapshot_path

CHILD = Path(__file__).with_name("freeze_child.py")
TTS_BENCH = Path(sys.executable).with_name("tts-bench")
ALL_FALSE = dict.fromkeys(
    ("DynamicScalingInSuspended", "DynamicScalingOutSuspended", "ScheduledScalingSuspended"), False
)


def _start_frozen(
    endpoint: str, artifacts: Path, env: dict[str, str], out: Path
) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, str(CHILD), endpoint, str(artifacts)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + 60
    while "FROZEN" not in out.read_text():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"child never froze (rc {child.poll()}):\n{out.read_text()}")
        time.sleep(0.05)
    return child


@pytest.mark.parametrize(
    ("sig", "word", "code"),
    [(signal.SIGTERM, "TERMINATED", 143), (signal.SIGINT, "INTERRUPTED", 130)],
    ids=["sigterm", "sigint"],
)
def test_signal_leaves_the_target_unsuspended(
    aws_env: dict[str, str], tmp_path: Path, sig: signal.Signals, word: str, code: int
) -> None:
    d = deploy(unique(), instances=2)
    out = tmp_path / "child.log"
    child = _start_frozen(d.endpoint, tmp_path, aws_env, out)
    assert not any(v is False for v in suspended(d.resource_id).values())
    assert desired_count(d.endpoint) == 1
    child.send_signal(sig)
    assert child.wait(timeout=60) == code, out.read_text()
    log = out.read_text()
    assert word in log, log
    assert "scaling restored, snapshot removed" in log, log
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert not snapshot_path(tmp_path, d.endpoint).exists()


def _bench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TTS_BENCH), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_sigkill_leaves_a_snapshot_that_drift_reports_and_thaw_repairs(
    aws_env: dict[str, str], tmp_path: Path
) -> None:
    d = deploy(unique(), instances=2)
    out = tmp_path / "child.log"
    child = _start_frozen(d.endpoint, tmp_path, aws_env, out)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert snapshot_path(tmp_path, d.endpoint).exists()
    assert all(suspended(d.resource_id).values())

    where = ("--endpoint", d.endpoint, "--artifacts-dir", str(tmp_path))
    drift = _bench(aws_env, "drift", *where)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "error: freeze_snapshot:" in drift.stdout
    assert f"tts-bench thaw --endpoint {d.endpoint}" in drift.stdout
    assert "error: suspended_scaling:" in drift.stdout
    assert "preflight-ok" not in drift.stdout

    repaired = _bench(aws_env, "thaw", *where, "--restore-capacity")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert not snapshot_path(tmp_path, d.endpoint).exists()

    drift = _bench(aws_env, "drift", *where)
    assert drift.returncode == 0, drift.stdout + drift.stderr
    assert drift.stdout.splitlines()[-1] == "preflight-ok"


FROZEN_FIXTURE_TEST = """
import os
import signal
import time


def test_measure(tts_frozen_endpoint):
    assert tts_frozen_endpoint.kind == "sagemaker"
    assert tts_frozen_endpoint.frozen_capacity
    assert tts_frozen_endpoint.instance_count() == 1
    print("FROZEN-IN-PYTEST", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)


def test_never_runs():
    raise AssertionError("SIGTERM must stop the session")
"""


def test_sigterm_under_pytest_restores_through_the_frozen_fixture(
    aws_env: dict[str, str], tmp_path: Path
) -> None:
    d = deploy(unique(), instances=2)
    (tmp_path / "test_frozen_run.py").write_text(FROZEN_FIXTURE_TEST)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_frozen_run.py",
            "-p",
            "no:cacheprovider",
            "-s",
            "--endpoint",
            d.endpoint,
            "--artifacts-dir",
            str(tmp_path / "reports"),
        ],
        cwd=tmp_path,
        env=aws_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert "FROZEN-IN-PYTEST" in output, output
    assert result.returncode == 2, output  # pytest: interrupted
    assert "test_never_runs" not in result.stdout.split("FROZEN-IN-PYTEST")[-1], output
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert not snapshot_path(tmp_path / "reports", d.endpoint).exists()
