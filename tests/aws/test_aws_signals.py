"""A frozen run stopped by SIGTERM, SIGHUP, SIGINT or SIGKILL, in a real subprocess on moto."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_tts_scaling.aws.lifecycle.snapshot import snapshot_path
from tests.aws.aws_helpers import (
    ALL_FALSE,
    deploy,
    desired_count,
    lock_keys,
    suspend_with_limits,
    suspended,
    target_state,
    unique,
)

CHILD = Path(__file__).with_name("freeze_child.py")
TTS_BENCH = Path(sys.executable).with_name("tts-bench")


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
    [
        (signal.SIGTERM, "TERMINATED: SIGTERM received while frozen", 143),
        (signal.SIGHUP, "TERMINATED: SIGHUP received while frozen", 129),
        (signal.SIGINT, "INTERRUPTED", 130),
    ],
    ids=["sigterm", "sighup", "sigint"],
)
def test_signal_leaves_the_target_unsuspended(
    aws_env: dict[str, str], tmp_path: Path, sig: signal.Signals, word: str, code: int
) -> None:
    d = deploy(unique(), instances=2)
    out = tmp_path / "child.log"
    child = _start_frozen(d.endpoint, tmp_path, aws_env, out)
    assert not any(v is False for v in suspended(d.resource_id).values())
    assert desired_count(d.endpoint) == 1
    assert lock_keys(d.endpoint)
    child.send_signal(sig)
    try:
        assert child.wait(timeout=60) == code, out.read_text()
    finally:  # a child that did not stop must not outlive its test
        if child.poll() is None:
            child.kill()
            child.wait()
    log = out.read_text()
    assert word in log, log
    assert "scaling restored, snapshot removed, lock released" in log, log
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert not snapshot_path(tmp_path, d.endpoint).exists()
    assert lock_keys(d.endpoint) == []


def _bench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TTS_BENCH), *args], env=env, capture_output=True, text=True, timeout=120
    )


def suggested(output: str) -> list[str]:
    """The `tts-bench ...` commands a message tells the user to run."""
    return re.findall(r"`(tts-bench [^`]+)`", output)


def test_sigkill_leaves_a_lock_that_drift_reports_and_its_advice_repairs(
    aws_env: dict[str, str], tmp_path: Path
) -> None:
    d = deploy(unique(), instances=2, min_capacity=2, max_capacity=5)
    out = tmp_path / "child.log"
    child = _start_frozen(d.endpoint, tmp_path, aws_env, out)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert snapshot_path(tmp_path, d.endpoint).exists()
    assert all(suspended(d.resource_id).values())
    assert desired_count(d.endpoint) == 1
    # Someone narrows the limits meanwhile: the thaw puts back what the snapshot holds.
    suspend_with_limits(d.resource_id, 1, 1)

    where = ("--endpoint", d.endpoint, "--artifacts-dir", str(tmp_path))
    drift = _bench(aws_env, "drift", *where)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "error: freeze_snapshot:" in drift.stdout
    assert "error: freeze_lock:" in drift.stdout
    assert "no longer running" in drift.stdout
    assert "interrupted" not in drift.stdout
    assert "error: suspended_scaling:" in drift.stdout
    assert "preflight-ok" not in drift.stdout
    commands = set(suggested(drift.stdout))
    assert commands == {
        f"tts-bench thaw --endpoint {d.endpoint} --artifacts-dir {tmp_path}",
        f"tts-bench thaw --endpoint {d.endpoint}",
    }, drift.stdout

    # The plain command, as drift printed it, from another directory: the lock says where.
    plain = f"tts-bench thaw --endpoint {d.endpoint}"
    repaired = subprocess.run(
        [str(TTS_BENCH), *shlex.split(plain)[1:]],
        env=aws_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path.parent,
    )
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    target = target_state(d.resource_id)
    assert target is not None
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 5)
    assert not snapshot_path(tmp_path, d.endpoint).exists()
    assert lock_keys(d.endpoint) == []

    drift = _bench(aws_env, "drift", *where)
    assert drift.returncode == 0, drift.stdout + drift.stderr
    assert drift.stdout.splitlines()[-1] == "preflight-ok"
    again = _bench(aws_env, "thaw", *where)
    assert again.returncode == 0, again.stdout + again.stderr


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
            f"--tts-artifacts-dir={tmp_path / 'reports'}",
        ],
        cwd=tmp_path,
        env=aws_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert "FROZEN-IN-PYTEST" in output, output
    assert result.returncode == 143, output  # 128 + SIGTERM, as tts-bench exits
    assert "test_never_runs" not in result.stdout.split("FROZEN-IN-PYTEST")[-1], output
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert not snapshot_path(tmp_path / "reports", d.endpoint).exists()
