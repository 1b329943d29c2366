"""Freeze and thaw against moto: snapshot first, suspend, pin, restore on every exit path."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import json
import os
import signal
from pathlib import Path
from typing import Any

from pytest_tts_scaling.aws.clients import AwsClients, WaitTimeout
from pytest_tts_scaling.aws.lifecycle.capacity import RestoreInterrupted
from pytest_tts_scaling.aws.lifecycle.freeze import freeze, thaw
from pytest_tts_scaling.aws.lifecycle.restore import restore
from pytest_tts_scaling.aws.lifecycle.signals import Terminated
from pytest_tts_scaling.aws.lifecycle.snapshot import FreezeSnapshot, read_snapshot, snapshot_path
from pytest_tts_scaling.errors import ArtifactError, InputError
from tests.aws.aws_helpers import (
    ALL_FALSE,
    ALL_TRUE,
    FakeClock,
    deploy,
    desired_count,
    record_operations,
    suspend,
    suspended,
    target_state,
    unique,
)


def test_freeze_suspends_pins_and_restores(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique(), instances=2)
    lines: list[str] = []
    with freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lines.append) as snapshot:
        assert suspended(d.resource_id) == ALL_TRUE
        assert desired_count(d.endpoint) == 1
        saved = read_snapshot(snapshot_path(tmp_path, d.endpoint))
        assert saved is not None
        assert saved.desired_instance_count == 2
        assert saved.target is not None
        assert saved.target.suspended_state == ALL_FALSE
        assert (saved.target.min_capacity, saved.target.max_capacity) == (1, 4)
        assert {p["PolicyName"] for p in saved.policies} == {
            f"{d.endpoint}-concurrency",
            f"{d.endpoint}-scale-in",
        }
        assert snapshot.endpoint == d.endpoint
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    target = target_state(d.resource_id)
    assert target is not None
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 4)
    assert not snapshot_path(tmp_path, d.endpoint).exists()
    assert any("frozen at one instance" in line for line in lines)


def test_snapshot_is_on_disk_before_the_first_change(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    path = snapshot_path(tmp_path, d.endpoint)
    seen_at_first_write: list[bool] = []

    def before_write(**kwargs: object) -> None:
        if not seen_at_first_write:
            seen_at_first_write.append(path.exists())

    clients.autoscaling.meta.events.register(
        "before-call.application-autoscaling.RegisterScalableTarget", before_write
    )
    clients.sagemaker.meta.events.register(
        "before-call.sagemaker.UpdateEndpointWeightsAndCapacities", before_write
    )
    with freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None):
        pass
    assert seen_at_first_write == [True]
    # Written atomically: no temp files left beside it.
    assert list(tmp_path.iterdir()) == []


def test_exception_restores_and_propagates(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique(), instances=3)
    with (
        pytest.raises(RuntimeError, match="ladder broke"),
        freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None),
    ):
        raise RuntimeError("ladder broke")
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 3
    assert not snapshot_path(tmp_path, d.endpoint).exists()


def test_keyboard_interrupt_restores(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    with (
        pytest.raises(KeyboardInterrupt),
        freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None),
    ):
        raise KeyboardInterrupt
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2


def test_sigterm_becomes_an_exception_and_the_handler_comes_back(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique())
    before = signal.getsignal(signal.SIGTERM)
    during: list[object] = []

    def qmax_run() -> None:
        with freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None):
            during.append(signal.getsignal(signal.SIGTERM))
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()  # not reached: the handler raises first

    with pytest.raises(Terminated):
        qmax_run()
    assert during[0] is not before
    assert signal.getsignal(signal.SIGTERM) is before
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 2
    assert not snapshot_path(tmp_path, d.endpoint).exists()


def test_restores_the_suspension_it_found(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    suspend(d.resource_id, ScheduledScalingSuspended=True)
    with freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None):
        assert suspended(d.resource_id) == ALL_TRUE
    assert suspended(d.resource_id) == {**ALL_FALSE, "ScheduledScalingSuspended": True}


def test_endpoint_without_a_target_is_pinned_and_left_without_one(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique(), target=False, tracking=False, step=False)
    with freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None) as snapshot:
        assert snapshot.target is None
        assert desired_count(d.endpoint) == 1
    assert target_state(d.resource_id) is None
    assert desired_count(d.endpoint) == 2


def test_target_deleted_while_frozen_is_left_alone(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique(), tracking=False, step=False)
    lines: list[str] = []
    with freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lines.append):
        clients.autoscaling.deregister_scalable_target(
            ServiceNamespace="sagemaker",
            ResourceId=d.resource_id,
            ScalableDimension="sagemaker:variant:DesiredInstanceCount",
        )
    assert target_state(d.resource_id) is None
    assert any("no longer exists, left alone" in line for line in lines)


def test_refuses_when_a_snapshot_is_left(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    path = snapshot_path(tmp_path, d.endpoint)
    path.write_text("{}")
    ops = record_operations(clients.autoscaling, clients.sagemaker)
    with (
        pytest.raises(InputError, match="tts-bench thaw --endpoint"),
        freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None),
    ):
        pass
    assert ops == []
    assert suspended(d.resource_id) == ALL_FALSE


def test_missing_endpoint_is_refused_before_writing(clients: AwsClients, tmp_path: Path) -> None:
    with (
        pytest.raises(InputError, match="not found"),
        freeze(clients, unique("gone"), artifacts_dir=tmp_path, log=lambda line: None),
    ):
        pass
    assert list(tmp_path.iterdir()) == []


def _hard_killed(clients: AwsClients, tmp_path: Path, endpoint: str) -> Path:
    """What a SIGKILLed run leaves: the snapshot, a suspended target, one instance."""
    description = clients.sagemaker.describe_endpoint(EndpointName=endpoint)
    from pytest_tts_scaling.artifacts import save
    from pytest_tts_scaling.aws.lifecycle.snapshot import take_snapshot

    path = snapshot_path(tmp_path, endpoint)
    save(take_snapshot(clients, endpoint, description), path)
    suspend(f"endpoint/{endpoint}/variant/AllTraffic", **ALL_TRUE)
    clients.sagemaker.update_endpoint_weights_and_capacities(
        EndpointName=endpoint,
        DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 1}],
    )
    return path


def test_thaw_restores_from_the_snapshot(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    suspend(d.resource_id, DynamicScalingInSuspended=True)
    path = _hard_killed(clients, tmp_path, d.endpoint)
    thaw(clients, d.endpoint, artifacts_dir=tmp_path, log=print)
    assert suspended(d.resource_id) == {**ALL_FALSE, "DynamicScalingInSuspended": True}
    assert desired_count(d.endpoint) == 2
    assert not path.exists()


def test_thaw_restore_capacity(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique(), instances=3)
    _hard_killed(clients, tmp_path, d.endpoint)
    thaw(clients, d.endpoint, artifacts_dir=tmp_path, log=print)
    assert suspended(d.resource_id) == ALL_FALSE
    assert desired_count(d.endpoint) == 3


def test_thaw_without_snapshot_clears_all_and_is_idempotent(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique())
    suspend(d.resource_id, **ALL_TRUE)
    thaw(clients, d.endpoint, artifacts_dir=tmp_path, log=print)
    assert suspended(d.resource_id) == ALL_FALSE
    ops = record_operations(clients.autoscaling, clients.sagemaker)
    lines = thaw(clients, d.endpoint, artifacts_dir=tmp_path, log=print)
    assert "RegisterScalableTarget" not in ops
    assert any("not suspended, left alone" in line for line in lines)


def test_thaw_of_an_unknown_endpoint_succeeds(clients: AwsClients, tmp_path: Path) -> None:
    lines = thaw(clients, unique("gone"), artifacts_dir=tmp_path, log=print)
    assert any("nothing to thaw" in line or "no snapshot" in line for line in lines)


def test_thaw_refuses_a_damaged_snapshot(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    snapshot_path(tmp_path, d.endpoint).write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ArtifactError, match="schema"):
        read_snapshot(snapshot_path(tmp_path, d.endpoint))
    with pytest.raises(InputError, match="delete it"):
        thaw(clients, d.endpoint, artifacts_dir=tmp_path, log=print)


def test_snapshot_round_trips(tmp_path: Path) -> None:
    from pytest_tts_scaling.artifacts import save

    snapshot = FreezeSnapshot(
        endpoint="e",
        variant="AllTraffic",
        created_at="2026-01-01T00:00:00+00:00",
        pid=1,
        target=None,
        desired_instance_count=2,
        current_instance_count=2,
    )
    path = save(snapshot, tmp_path / ".freeze-e.json")
    assert json.loads(path.read_text())["schema"] == "tts-scaling/freeze/1"
    assert read_snapshot(path) == snapshot


def _described(name: str, status: str, instances: int) -> dict[str, object]:
    """DescribeEndpoint's answer for a one-variant endpoint settled at `instances`."""
    variant = {
        "VariantName": "AllTraffic",
        "CurrentInstanceCount": instances,
        "DesiredInstanceCount": instances,
    }
    return {"EndpointName": name, "EndpointStatus": status, "ProductionVariants": [variant]}


class UpdatingSageMaker:
    """A SageMaker that stays `Updating` for a number of DescribeEndpoint calls."""

    def __init__(self, updating_for: int, desired: int = 1):
        self.updating_for = updating_for
        self.desired = desired
        self.updates: list[int] = []

    def describe_endpoint(self, EndpointName: str) -> dict[str, object]:
        self.updating_for -= 1
        status = "Updating" if self.updating_for >= 0 else "InService"
        return _described(EndpointName, status, self.desired)

    def update_endpoint_weights_and_capacities(self, **kwargs: object) -> None:
        capacities = kwargs["DesiredWeightsAndCapacities"]
        self.updates.append(capacities[0]["DesiredInstanceCount"])  # type: ignore[index]


def _pinned_snapshot() -> FreezeSnapshot:
    return FreezeSnapshot(
        endpoint="speech-x",
        variant="AllTraffic",
        created_at="2026-01-01T00:00:00+00:00",
        pid=1,
        target=None,
        desired_instance_count=3,
        current_instance_count=3,
    )


def _clients_with(sagemaker: UpdatingSageMaker, fake_clock: FakeClock) -> AwsClients:
    clients = AwsClients(clock=fake_clock.clock())
    clients._clients["sagemaker"] = sagemaker
    return clients


def test_capacity_restore_waits_for_in_service(fake_clock: FakeClock) -> None:
    sagemaker = UpdatingSageMaker(updating_for=3)
    lines = restore(
        _clients_with(sagemaker, fake_clock),
        _pinned_snapshot(),
        log=print,
        poll_s=15,
    )
    assert sagemaker.updates == [3]
    assert fake_clock.sleeps == [15, 15]
    assert lines == ["speech-x/AllTraffic: desired instance count 1 -> 3"]


def test_capacity_restore_wait_can_be_cut_short(fake_clock: FakeClock) -> None:
    sagemaker = UpdatingSageMaker(updating_for=100)
    signals = iter([False, False, True])
    with pytest.raises(RestoreInterrupted):
        restore(
            _clients_with(sagemaker, fake_clock),
            _pinned_snapshot(),
            log=print,
            interrupted=lambda: next(signals),
        )
    assert sagemaker.updates == []
    assert len(fake_clock.sleeps) == 2


def test_capacity_restore_wait_is_bounded(fake_clock: FakeClock) -> None:
    sagemaker = UpdatingSageMaker(updating_for=10_000)
    with pytest.raises(WaitTimeout):
        restore(
            _clients_with(sagemaker, fake_clock),
            _pinned_snapshot(),
            log=print,
            timeout_s=600,
            poll_s=15,
        )
    assert sum(fake_clock.sleeps) == 600
    assert sagemaker.updates == []


class RolledBackSageMaker(UpdatingSageMaker):
    """Updating once, then stuck in a state no wait can leave."""

    def __init__(self, final: str):
        super().__init__(updating_for=1)
        self.final = final

    def describe_endpoint(self, EndpointName: str) -> dict[str, object]:
        answer = super().describe_endpoint(EndpointName)
        if answer["EndpointStatus"] == "InService":
            answer["EndpointStatus"] = self.final
        return answer


@pytest.mark.parametrize("final", ["UpdateRollbackFailed", "Failed", "OutOfService"])
def test_a_terminal_status_ends_the_wait_at_once(fake_clock: FakeClock, final: str) -> None:
    from pytest_tts_scaling.aws.lifecycle.capacity import FreezeError

    sagemaker = RolledBackSageMaker(final)
    with pytest.raises(FreezeError, match=f"is {final}: cannot hold its capacity"):
        restore(
            _clients_with(sagemaker, fake_clock),
            _pinned_snapshot(),
            log=print,
            timeout_s=30 * 60,
            poll_s=15,
        )
    assert sum(fake_clock.sleeps) <= 15  # not the 30-minute bound
    assert sagemaker.updates == []


class RaisingTarget:
    """Application Auto Scaling and SageMaker together, as they would race a restore: limits
    registered around a desired count outside them make the service move the count itself,
    one DescribeEndpoint later than the registration returns (Updating for two more), and an
    UpdateEndpointWeightsAndCapacities sent before that update has finished is refused."""

    def __init__(self) -> None:
        self.desired = 1
        self.target = {"ResourceId": "endpoint/speech-x/variant/AllTraffic", "MinCapacity": 1}
        self.target |= {"MaxCapacity": 1, "SuspendedState": dict.fromkeys(ALL_TRUE, True)}
        self.pending: list[str] = []
        self.registered: list[tuple[int, int]] = []
        self.updates: list[int] = []

    def describe_scalable_targets(self, **kwargs: object) -> dict[str, object]:
        return {"ScalableTargets": [dict(self.target)]}

    def register_scalable_target(self, **kwargs: Any) -> None:
        self.target |= {k: kwargs[k] for k in ("MinCapacity", "MaxCapacity", "SuspendedState")}
        self.registered.append((kwargs["MinCapacity"], kwargs["MaxCapacity"]))
        if not kwargs["MinCapacity"] <= self.desired <= kwargs["MaxCapacity"]:
            self.pending = ["InService", "Updating", "Updating"]

    def describe_endpoint(self, EndpointName: str) -> dict[str, object]:
        status = self.pending.pop(0) if self.pending else "InService"
        if status == "Updating" and not self.pending:
            self.desired = int(self.target["MinCapacity"])  # type: ignore[call-overload]
        return _described(EndpointName, status, self.desired)

    def update_endpoint_weights_and_capacities(self, **kwargs: Any) -> None:
        if self.pending:
            raise RuntimeError("ValidationException: Cannot update in-progress endpoint")
        self.desired = kwargs["DesiredWeightsAndCapacities"][0]["DesiredInstanceCount"]
        self.updates.append(self.desired)


def _raising(
    fake_clock: FakeClock, min_capacity: int
) -> tuple[RaisingTarget, AwsClients, FreezeSnapshot]:
    """The fake, clients on it, and a snapshot of 3 instances within min_capacity..4."""
    from pytest_tts_scaling.aws.lifecycle.snapshot import TargetSnapshot

    fake = RaisingTarget()
    clients = AwsClients(clock=fake_clock.clock())
    clients._clients |= {"sagemaker": fake, "application-autoscaling": fake}
    target = TargetSnapshot(
        resource_id="endpoint/speech-x/variant/AllTraffic",
        min_capacity=min_capacity,
        max_capacity=4,
        suspended_state=ALL_FALSE,
    )
    return fake, clients, _pinned_snapshot().model_copy(update={"target": target})


def test_restore_never_registers_limits_that_leave_the_count_outside(
    fake_clock: FakeClock,
) -> None:
    """Limits 2..4 around the pinned 1 would start the service's own update, racing the
    restore's; they come back widened to 1..4, the count goes to 3, then 2..4."""
    fake, clients, snapshot = _raising(fake_clock, min_capacity=2)
    lines = restore(clients, snapshot, log=print, poll_s=15)
    assert fake.updates == [3]
    assert fake.registered == [(1, 4), (2, 4)]
    assert fake.target["SuspendedState"] == ALL_FALSE
    assert fake_clock.sleeps == []
    assert lines == [
        "endpoint/speech-x/variant/AllTraffic: SuspendedState restored to "
        "DynamicScalingInSuspended=false, DynamicScalingOutSuspended=false, "
        "ScheduledScalingSuspended=false; capacity 1..1 -> 1..4; 2..4 once the instance count "
        "is back",
        "speech-x/AllTraffic: desired instance count 1 -> 3",
        "endpoint/speech-x/variant/AllTraffic: capacity 2..4",
    ]


def test_limits_that_hold_the_count_come_back_at_once(fake_clock: FakeClock) -> None:
    fake, clients, snapshot = _raising(fake_clock, min_capacity=1)
    restore(clients, snapshot, log=print, poll_s=15)
    assert fake.registered == [(1, 4)]
    assert fake.updates == [3]
