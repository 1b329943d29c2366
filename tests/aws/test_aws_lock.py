"""The freeze lock on the endpoint: one run at a time, from any artifacts directory or machine."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.lifecycle.freeze import freeze, thaw
from pytest_tts_scaling.aws.lifecycle.lock import FreezeLock, RestoreValues, read_locks, write_lock
from pytest_tts_scaling.aws.lifecycle.snapshot import snapshot_path
from pytest_tts_scaling.errors import InputError
from tests.aws.aws_helpers import (
    ALL_FALSE,
    ALL_TRUE,
    client,
    deploy,
    desired_count,
    lock_keys,
    record_operations,
    suspend,
    suspended,
    target_state,
    unique,
)

CHILD = Path(__file__).with_name("freeze_child.py")
WRITES = {
    "AddTags",
    "DeleteTags",
    "RegisterScalableTarget",
    "UpdateEndpointWeightsAndCapacities",
    "UpdateInferenceComponentRuntimeConfig",
}


def _child(
    endpoint: str, artifacts: Path, env: dict[str, str], out: Path, *extra: str
) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, str(CHILD), endpoint, str(artifacts), *extra],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )


def _wait_for(out: Path, child: subprocess.Popen[bytes], *words: str) -> str:
    deadline = time.monotonic() + 60
    while not any(word in out.read_text() for word in words):
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"child never said {words} (rc {child.poll()}):\n{out.read_text()}")
        time.sleep(0.05)
    return out.read_text()


def _frozen_child(
    endpoint: str, artifacts: Path, env: dict[str, str], out: Path
) -> subprocess.Popen[bytes]:
    child = _child(endpoint, artifacts, env, out)
    _wait_for(out, child, "FROZEN")
    return child


def _arn(endpoint: str) -> str:
    return str(client("sagemaker").describe_endpoint(EndpointName=endpoint)["EndpointArn"])


def test_restore_values_round_trip_through_a_tag() -> None:
    values = RestoreValues(desired=3, min_capacity=2, max_capacity=9, suspended=ALL_FALSE)
    assert RestoreValues.parse(values.tag()) == values
    assert values.tag() == "desired=3 min=2 max=9 in=false out=false scheduled=false"
    assert RestoreValues.parse(RestoreValues(desired=2).tag()) == RestoreValues(desired=2)


def test_a_second_run_from_another_artifacts_dir_is_refused_before_any_change(
    aws_env: dict[str, str], tmp_path: Path, clients: AwsClients
) -> None:
    d = deploy(unique(), instances=2)
    first, second = tmp_path / "first", tmp_path / "second"
    out = tmp_path / "first.log"
    child = _frozen_child(d.endpoint, first, aws_env, out)
    (lock,) = read_locks(client("sagemaker"), _arn(d.endpoint))
    assert lock.pid == child.pid
    assert lock.snapshot is not None
    assert lock.snapshot.endswith(str(snapshot_path(first, d.endpoint).resolve()))
    assert lock.restore == RestoreValues(2, 1, 4, ALL_FALSE)

    ops = record_operations(clients.sagemaker, clients.autoscaling)
    with (
        pytest.raises(InputError) as refused,
        freeze(clients, d.endpoint, artifacts_dir=second, log=lambda line: None),
    ):
        pytest.fail("the second run must not freeze")
    message = str(refused.value)
    assert f"run {lock.run_id} (pid {child.pid} on this host, still running" in message
    assert "nothing was changed" in message
    assert "wait for that run to end" in message
    assert "--force" in message
    assert "interrupted" not in message
    assert not WRITES & set(ops), ops
    assert not second.exists() or list(second.iterdir()) == []

    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 143, out.read_text()
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert lock_keys(d.endpoint) == []


def test_two_runs_started_together_never_both_freeze(
    aws_env: dict[str, str], tmp_path: Path
) -> None:
    d = deploy(unique(), instances=3)
    runs = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.log"
        runs.append((_child(d.endpoint, tmp_path / name, aws_env, out), out))
    said = [_wait_for(out, child, "FROZEN", "REFUSED") for child, out in runs]
    frozen = [child for (child, _), text in zip(runs, said, strict=True) if "FROZEN" in text]
    assert len(frozen) <= 1, said
    for child, out in runs:
        if child in frozen:
            child.send_signal(signal.SIGTERM)
            assert child.wait(timeout=60) == 143, out.read_text()
        else:
            assert child.wait(timeout=60) == 2, out.read_text()
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 3
    assert lock_keys(d.endpoint) == []


def test_runs_that_tag_at_the_same_moment_both_back_off(
    aws_env: dict[str, str], tmp_path: Path, fake_clock: object
) -> None:
    d = deploy(unique(), instances=2)
    # Both read the (empty) tags, then both tag, then both read them back before either backs
    # off. (Had one backed off before the other read back, the other would rightly go ahead.)
    both_read, both_tagged, both_read_back = (threading.Barrier(2, timeout=30) for _ in range(3))
    results: dict[str, BaseException | None] = {}

    def run(name: str) -> None:
        clients = AwsClients()
        reads: list[int] = []
        tagged: list[int] = []

        def after_list_tags(**kwargs: object) -> None:
            reads.append(1)
            if len(reads) == 1:
                both_read.wait()
            elif tagged == [1]:
                tagged.append(1)  # the read-back: once
                both_read_back.wait()

        def after_add_tags(**kwargs: object) -> None:
            both_tagged.wait()
            tagged.append(1)

        clients.sagemaker.meta.events.register("after-call.sagemaker.ListTags", after_list_tags)
        clients.sagemaker.meta.events.register("after-call.sagemaker.AddTags", after_add_tags)
        try:
            with freeze(clients, d.endpoint, artifacts_dir=tmp_path / name, log=lambda line: None):
                results[name] = None
        except InputError as exc:
            results[name] = exc

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert set(results) == {"a", "b"}
    for exc in results.values():
        assert isinstance(exc, InputError)
        assert "locked the endpoint at the same moment" in str(exc)
        assert "changed nothing" in str(exc)
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert lock_keys(d.endpoint) == []
    assert [p for name in ("a", "b") for p in (tmp_path / name).glob(".freeze-*")] == []


def test_force_takes_over_a_dead_run_and_restores_what_it_found(
    aws_env: dict[str, str], tmp_path: Path, clients: AwsClients
) -> None:
    d = deploy(unique(), instances=2)
    out = tmp_path / "killed.log"
    child = _frozen_child(d.endpoint, tmp_path / "killed", aws_env, out)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert desired_count(d.endpoint) == 1

    with (
        pytest.raises(InputError, match=r"no longer running.*tts-bench thaw --endpoint"),
        freeze(clients, d.endpoint, artifacts_dir=tmp_path / "new", log=print),
    ):
        pass
    lines: list[str] = []
    with freeze(clients, d.endpoint, artifacts_dir=tmp_path / "new", log=lines.append, force=True):
        (mine,) = read_locks(clients.sagemaker, _arn(d.endpoint))
        assert mine.pid != child.pid
        assert mine.restore == RestoreValues(2, 1, 4, ALL_FALSE)
        assert not snapshot_path(tmp_path / "killed", d.endpoint).exists()
    assert any("--force: taking" in line and "desired=2" in line for line in lines), lines
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert lock_keys(d.endpoint) == []


def test_a_frozen_endpoint_without_a_lock_is_refused(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique(), instances=2)
    suspend(d.resource_id, **ALL_TRUE)
    ops = record_operations(clients.sagemaker, clients.autoscaling)
    with (
        pytest.raises(InputError, match=r"already suspended.*no run holds a lock"),
        freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=print),
    ):
        pass
    assert not WRITES & set(ops)
    with freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=print, force=True):
        assert desired_count(d.endpoint) == 1
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2


def test_thaw_refuses_while_the_run_is_alive(
    aws_env: dict[str, str], tmp_path: Path, clients: AwsClients
) -> None:
    d = deploy(unique(), instances=2)
    out = tmp_path / "live.log"
    child = _frozen_child(d.endpoint, tmp_path / "live", aws_env, out)
    try:
        with pytest.raises(InputError, match=r"still running.*pass --force"):
            thaw(clients, d.endpoint, artifacts_dir=tmp_path / "elsewhere", log=print)
        assert desired_count(d.endpoint) == 1
        assert all(suspended(d.resource_id).values())
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    assert lock_keys(d.endpoint) == []


def test_a_lock_from_another_machine_is_thawed_from_its_tags(
    aws_env: dict[str, str], tmp_path: Path, clients: AwsClients
) -> None:
    d = deploy(unique(), instances=3, min_capacity=2, max_capacity=6)
    lock = FreezeLock(
        run_id="0123456789ab",
        host="build-agent-7",
        pid=4242,
        created_at="2026-01-01T00:00:00+00:00",
        snapshot="build-agent-7:/home/ci/reports/.freeze-x.json",
        restore=RestoreValues(3, 2, 6, ALL_FALSE),
    )
    write_lock(clients.sagemaker, _arn(d.endpoint), lock)
    suspend(d.resource_id, **ALL_TRUE)
    clients.sagemaker.update_endpoint_weights_and_capacities(
        EndpointName=d.endpoint,
        DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 1}],
    )
    with pytest.raises(InputError) as refused:
        thaw(clients, d.endpoint, artifacts_dir=tmp_path, log=print)
    assert "host build-agent-7" in str(refused.value)
    assert f"`tts-bench thaw --endpoint {d.endpoint} --force`" in str(refused.value)
    lines = thaw(clients, d.endpoint, artifacts_dir=tmp_path, log=print, force=True)
    assert any("the lock tags of run 0123456789ab" in line for line in lines), lines
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 3
    target = target_state(d.resource_id)
    assert target is not None
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 6)
    assert lock_keys(d.endpoint) == []


def test_a_failed_restore_names_a_thaw_that_works_as_printed(
    aws_env: dict[str, str], tmp_path: Path, clients: AwsClients
) -> None:
    import re
    import shlex

    from botocore.exceptions import ClientError

    d = deploy(unique(), instances=2)
    artifacts = tmp_path / "deep" / "reports"

    def refuse_scale_up(params: dict[str, object], **kwargs: object) -> None:
        wanted = params["DesiredWeightsAndCapacities"][0]["DesiredInstanceCount"]  # type: ignore[index]
        if wanted != 1:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "slow down"}},
                "UpdateEndpointWeightsAndCapacities",
            )

    clients.sagemaker.meta.events.register(
        "provide-client-params.sagemaker.UpdateEndpointWeightsAndCapacities", refuse_scale_up
    )
    lines: list[str] = []
    with (
        pytest.raises(RuntimeError, match="restore failed"),
        freeze(clients, d.endpoint, artifacts_dir=artifacts, log=lines.append),
    ):
        pass
    (command,) = re.findall(r"`(tts-bench thaw [^`]+)`", "\n".join(lines))
    assert f"--artifacts-dir {artifacts}" in command
    tts_bench = Path(sys.executable).with_name("tts-bench")
    done = subprocess.run(
        [str(tts_bench), *shlex.split(command)[1:]],
        env=aws_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert lock_keys(d.endpoint) == []
    assert not snapshot_path(artifacts, d.endpoint).exists()


def test_tts_bench_qmax_on_a_held_endpoint_is_a_refusal_not_an_interruption(
    aws_env: dict[str, str], tmp_path: Path
) -> None:
    d = deploy(unique(), instances=2)
    out = tmp_path / "holder.log"
    child = _frozen_child(d.endpoint, tmp_path / "holder", aws_env, out)
    try:
        refused = subprocess.run(
            [
                str(Path(sys.executable).with_name("tts-bench")),
                "qmax",
                "--endpoint",
                d.endpoint,
                "--ladder",
                "1",
                "--artifacts-dir",
                str(tmp_path / "second"),
            ],
            env=aws_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "error: " in refused.stderr
    assert "is held by another run" in refused.stderr
    assert "interrupted" not in refused.stderr + refused.stdout
    assert "stopped" not in refused.stderr
    assert desired_count(d.endpoint) == 2
    assert lock_keys(d.endpoint) == []


@pytest.mark.parametrize("command", ["qmax", "ttotal", "thaw"])
def test_every_command_that_refuses_takes_the_force_it_suggests(command: str) -> None:
    from pytest_tts_scaling.cli import build_parser
    from pytest_tts_scaling.options import RunOptions

    extra = ["--qmax-artifact", "q.json"] if command == "ttotal" else []
    args = build_parser().parse_args([command, "--endpoint", "speech-x", *extra, "--force"])
    values = {k: v for k, v in vars(args).items() if k.startswith("tts_")}
    assert RunOptions.from_namespace(values).force is True
