"""Freeze an endpoint for a measurement and thaw it again, on every exit path (SPEC §4).

Order matters: the snapshot file is written (atomically) before anything changes, so a run killed
at any point leaves either nothing changed or a snapshot that `tts-bench thaw` restores from.
Then the run locks the endpoint (:mod:`pytest_tts_scaling.aws.lock`): a second run, from any
machine or artifacts directory, is refused before it changes anything, and thaw finds what to
restore from the lock alone. While frozen, SIGTERM and SIGHUP raise :class:`Terminated` in the
main thread, so the `finally` that restores runs as it does for Ctrl-C; during the restore every
stop signal is held back.

With an inference component the component is frozen instead of the variant: its scalable target
(`inference-component/NAME`) is suspended and its copies are pinned to one with
UpdateInferenceComponentRuntimeConfig.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_tts_scaling.artifacts import save
from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients, aws_errors
from pytest_tts_scaling.aws.fingerprint import (
    TERMINAL_STATUSES,
    component_state,
    describe_component,
    describe_endpoint,
    variant_states,
)
from pytest_tts_scaling.aws.lock import (
    FreezeLock,
    RestoreValues,
    abandon_lock,
    new_run_id,
    read_locks,
    remove_lock,
    this_host,
    write_lock,
)
from pytest_tts_scaling.core.timeline import iso, parse_iso
from pytest_tts_scaling.errors import ArtifactError, InputError

FREEZE_SCHEMA = "tts-scaling/freeze/1"
IN_SERVICE_TIMEOUT_S = 30 * 60.0
POLL_S = 15.0

Log = Callable[[str], None]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived while frozen; pytest and asyncio stop for it as for Ctrl-C.

    A signal held back during a restore is raised as this once the restore is done, SIGINT
    included; the exit status is 128 + the signal number, as the shell reports it.
    """

    def __init__(self, signum: int, when: str = "while frozen") -> None:
        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} received {when}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class FreezeError(RuntimeError):
    """The endpoint did not reach the frozen state (the restore has run)."""


class RestoreInterrupted(RuntimeError):
    """A second signal arrived while the restore waited for the endpoint; the wait was cut."""


class RestoreError(RuntimeError):
    """Scaling could not be fully restored; the snapshot is kept for `tts-bench thaw`."""


class TargetSnapshot(BaseModel):
    model_config = ConfigDict(extra="allow")

    resource_id: str
    min_capacity: int
    max_capacity: int
    suspended_state: dict[str, bool]


class FreezeSnapshot(BaseModel):
    """What freeze changes, as it was before: written before the first change."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_: Literal["tts-scaling/freeze/1"] = Field(alias="schema", default="tts-scaling/freeze/1")
    endpoint: str
    variant: str
    created_at: str
    pid: int
    target: TargetSnapshot | None
    policies: list[dict[str, Any]] = Field(default_factory=list)
    desired_instance_count: int | None
    current_instance_count: int | None
    inference_component: str | None = None
    desired_copy_count: int | None = None
    current_copy_count: int | None = None
    run_id: str | None = None
    host: str | None = None

    @property
    def wanted_capacity(self) -> int | None:
        """The count restore puts back: copies for a component, else instances."""
        if self.inference_component:
            return self.desired_copy_count
        return self.desired_instance_count


def snapshot_path(artifacts_dir: Path, endpoint: str, component: str | None = None) -> Path:
    """`.freeze-ENDPOINT.json`, or `.freeze-ENDPOINT.COMPONENT.json` (names hold no dots)."""
    name = f"{endpoint}.{component}" if component else endpoint
    return Path(artifacts_dir) / f".freeze-{name}.json"


def thaw_command(
    endpoint: str, component: str | None, artifacts_dir: Path | None = None, *, force: bool = False
) -> str:
    """The `tts-bench thaw` line that restores this endpoint, runnable as printed."""
    which = f" --inference-component {component}" if component else ""
    where = f" --artifacts-dir {shlex.quote(str(artifacts_dir))}" if artifacts_dir else ""
    return f"tts-bench thaw --endpoint {endpoint}{which}{where}{' --force' if force else ''}"


def read_snapshot(path: Path) -> FreezeSnapshot | None:
    """The snapshot at `path`, None when there is none; a damaged one is an ArtifactError."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: unreadable freeze snapshot: {exc}") from None
    if not isinstance(raw, dict) or raw.get("schema") != FREEZE_SCHEMA:
        got = raw.get("schema") if isinstance(raw, dict) else type(raw).__name__
        raise ArtifactError(f"{path}: field 'schema': expected {FREEZE_SCHEMA!r}, got {got!r}")
    try:
        return FreezeSnapshot.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(part) for part in err["loc"])
        raise ArtifactError(f"{path}: field '{loc}': {err['msg'].lower()}") from None


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def take_snapshot(
    clients: AwsClients,
    endpoint: str,
    description: dict[str, Any],
    component: str | None = None,
) -> FreezeSnapshot:
    """What the endpoint holds now, under a new run id."""
    states = variant_states(description)
    if not states:
        raise InputError(f"endpoint {endpoint!r} has no production variants to freeze")
    variant = states[0]
    copies = None
    if component:
        found = describe_component(clients.sagemaker, component)
        if found is None:
            raise InputError(f"inference component {component!r} not found: nothing to freeze")
        copies = component_state(found)
        if copies.endpoint != endpoint:
            raise InputError(
                f"inference component {component!r} runs on endpoint {copies.endpoint!r}, not "
                f"{endpoint!r}"
            )
        variant = next((v for v in states if v.name == copies.variant), variant)
        resource = scaling.component_resource_id(component)
        policies = scaling.policies_for_resource(clients.autoscaling, resource)
    else:
        resource = scaling.resource_id(endpoint, variant.name)
        policies = [
            p
            for p in scaling.policies_for_endpoint(clients.autoscaling, endpoint)
            if p["ResourceId"] == resource
        ]
    target = scaling.describe_target(clients.autoscaling, resource)
    return FreezeSnapshot(
        endpoint=endpoint,
        variant=variant.name,
        created_at=iso(clients.clock.now()),
        pid=os.getpid(),
        target=None
        if target is None
        else TargetSnapshot(
            resource_id=resource,
            min_capacity=target["MinCapacity"],
            max_capacity=target["MaxCapacity"],
            suspended_state=scaling.suspended_state(target),
        ),
        policies=_json_safe(policies),
        desired_instance_count=variant.desired_instance_count,
        current_instance_count=variant.current_instance_count,
        inference_component=component,
        desired_copy_count=None if copies is None else copies.desired_copy_count,
        current_copy_count=None if copies is None else copies.current_copy_count,
        run_id=new_run_id(),
        host=this_host(),
    )


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """For the duration, SIGTERM and SIGHUP raise Terminated; the previous handlers come back.

    SIGHUP is what a closed terminal or SSH session sends: it must restore as SIGTERM does.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """SIGTERM, SIGHUP and SIGINT are recorded, not acted on, so no signal can cut a restore."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (*STOP_SIGNALS, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _variant_counts(
    clients: AwsClients, endpoint: str, variant: str
) -> tuple[str, int | None, int | None]:
    description = describe_endpoint(clients.sagemaker, endpoint)
    if description is None:
        return "Missing", None, None
    state = next((v for v in variant_states(description) if v.name == variant), None)
    if state is None:
        return str(description.get("EndpointStatus")), None, None
    return (
        str(description.get("EndpointStatus")),
        state.current_instance_count,
        state.desired_instance_count,
    )


@dataclass(frozen=True)
class Capacity:
    """What freeze pins: a variant's instances, or an inference component's copies."""

    clients: AwsClients
    endpoint: str
    variant: str
    component: str | None = None

    @classmethod
    def of(cls, clients: AwsClients, snapshot: FreezeSnapshot) -> Capacity:
        return cls(clients, snapshot.endpoint, snapshot.variant, snapshot.inference_component)

    @property
    def unit(self) -> str:
        return "copy count" if self.component else "instance count"

    def describe(self) -> str:
        if self.component:
            return f"inference component {self.component}"
        return f"{self.endpoint}/{self.variant}"

    def counts(self) -> tuple[str, int | None, int | None]:
        """(status, current, desired); status "Missing" when the endpoint or component is gone."""
        if not self.component:
            return _variant_counts(self.clients, self.endpoint, self.variant)
        found = describe_component(self.clients.sagemaker, self.component)
        if found is None:
            return "Missing", None, None
        state = component_state(found)
        return state.status, state.current_copy_count, state.desired_copy_count

    def set(self, count: int) -> None:
        if self.component:
            self.clients.sagemaker.update_inference_component_runtime_config(
                InferenceComponentName=self.component, DesiredRuntimeConfig={"CopyCount": count}
            )
        else:
            self.clients.sagemaker.update_endpoint_weights_and_capacities(
                EndpointName=self.endpoint,
                DesiredWeightsAndCapacities=[
                    {"VariantName": self.variant, "DesiredInstanceCount": count}
                ],
            )

    def wait_in_service(
        self,
        *,
        count: int | None,
        timeout_s: float,
        poll_s: float,
        interrupted: Callable[[], bool] = lambda: False,
    ) -> None:
        """Until InService (with `count` current, when given); bounded by the clients' clock."""
        where = self.describe()

        def probe() -> bool | None:
            if interrupted():
                raise RestoreInterrupted(f"stopped waiting for {where} to be InService")
            status, current, desired = self.counts()
            if status in TERMINAL_STATUSES or status == "Missing":
                raise FreezeError(f"{where} is {status}: cannot hold its capacity")
            if status == "InService" and (count is None or current == count):
                return True
            if status == "InService" and desired != count:
                raise FreezeError(
                    f"{where} is InService with desired {self.unit} {desired}, not {count}: the "
                    "update was rolled back or overridden"
                )
            return None

        what = f"{where} InService" + (f" with {self.unit} {count}" if count else "")
        self.clients.clock.wait_for(probe, timeout_s=timeout_s, interval_s=poll_s, what=what)


def restore_values(snapshot: FreezeSnapshot) -> RestoreValues:
    """The values a restore from `snapshot` puts back, as the lock's tags carry them."""
    target = snapshot.target
    return RestoreValues(
        desired=snapshot.wanted_capacity,
        min_capacity=None if target is None else target.min_capacity,
        max_capacity=None if target is None else target.max_capacity,
        suspended=None if target is None else dict(target.suspended_state),
    )


def with_originals(snapshot: FreezeSnapshot, values: RestoreValues) -> FreezeSnapshot:
    """`snapshot` restoring to `values` (what the run it takes over found) instead of to now."""
    key = "desired_copy_count" if snapshot.inference_component else "desired_instance_count"
    update: dict[str, Any] = {key: values.desired}
    if snapshot.target is not None:
        target = snapshot.target
        update["target"] = target.model_copy(
            update={
                "min_capacity": values.min_capacity or target.min_capacity,
                "max_capacity": values.max_capacity or target.max_capacity,
                "suspended_state": values.suspended or dict(scaling.NONE_SUSPENDED),
            }
        )
    return snapshot.model_copy(update=update)


def snapshot_from_lock(lock: FreezeLock, endpoint: str, variant: str) -> FreezeSnapshot | None:
    """A snapshot rebuilt from the restore values in a lock's tags; None when it holds none."""
    values = lock.restore
    if values is None:
        return None
    resource = (
        scaling.component_resource_id(lock.component)
        if lock.component
        else scaling.resource_id(endpoint, variant)
    )
    target = None
    if values.suspended is not None:
        target = TargetSnapshot(
            resource_id=resource,
            min_capacity=values.min_capacity or 0,
            max_capacity=values.max_capacity or 0,
            suspended_state=values.suspended,
        )
    return FreezeSnapshot(
        endpoint=endpoint,
        variant=variant,
        created_at=lock.created_at,
        pid=lock.pid,
        target=target,
        desired_instance_count=None if lock.component else values.desired,
        current_instance_count=None,
        inference_component=lock.component,
        desired_copy_count=values.desired if lock.component else None,
        run_id=lock.run_id,
        host=lock.host,
    )


def lock_of(snapshot: FreezeSnapshot, path: Path) -> FreezeLock:
    """The lock a run holding `snapshot` (written to `path`) puts on the endpoint."""
    host = snapshot.host or this_host()
    return FreezeLock(
        run_id=snapshot.run_id or "unknown",
        host=host,
        pid=snapshot.pid,
        created_at=snapshot.created_at,
        snapshot=f"{host}:{Path(path).resolve()}",
        restore=restore_values(snapshot),
        component=snapshot.inference_component,
    )


def lock_file(lock: FreezeLock) -> Path | None:
    """The lock's snapshot file when it is on this machine."""
    prefix = f"{this_host()}:"
    if lock.snapshot and lock.snapshot.startswith(prefix):
        return Path(lock.snapshot[len(prefix) :])
    return None


def lock_advice(lock: FreezeLock, endpoint: str, artifacts_dir: Path | None = None) -> str:
    """What to do about another run's lock, with a command that works as printed."""
    alive = lock.alive()
    if alive:
        return "wait for that run to end (its exit restores the endpoint) or stop it"
    command = thaw_command(endpoint, lock.component, artifacts_dir, force=alive is None)
    if alive is False:
        return f"that run is gone: run `{command}` to restore the endpoint"
    return f"if that run is no longer running, run `{command}` to restore the endpoint"


def restore(
    clients: AwsClients,
    snapshot: FreezeSnapshot,
    *,
    log: Log,
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
    interrupted: Callable[[], bool] = lambda: False,
) -> list[str]:
    """Put back everything the snapshot recorded. Idempotent; a target that is gone is left alone.

    The scaling flags and capacity limits come back first (they are what leaves an endpoint
    unable to scale), then the desired instance (or copy) count; SageMaker refuses that while
    the endpoint is updating, so it waits for InService first unless `interrupted()` says to
    stop waiting. Returns what was done, one line each.
    """
    done: list[str] = []

    def note(line: str) -> None:
        done.append(line)
        log(line)

    if snapshot.target is not None:
        want = snapshot.target
        resource = want.resource_id
        current = scaling.describe_target(clients.autoscaling, resource)
        if current is None:
            note(f"{resource}: scalable target no longer exists, left alone")
        else:
            changes: list[str] = []
            if scaling.suspended_state(current) != want.suspended_state:
                changes.append(f"SuspendedState restored to {_flags(want.suspended_state)}")
            limits = (current["MinCapacity"], current["MaxCapacity"])
            moved = limits != (want.min_capacity, want.max_capacity)
            if moved:
                changes.append(
                    f"capacity {limits[0]}..{limits[1]} -> {want.min_capacity}..{want.max_capacity}"
                )
            if changes:
                scaling.register_suspended(
                    clients.autoscaling,
                    resource,
                    want.suspended_state,
                    min_capacity=want.min_capacity if moved else None,
                    max_capacity=want.max_capacity if moved else None,
                )
                note(f"{resource}: " + "; ".join(changes))
            else:
                note(
                    f"{resource}: SuspendedState already {_flags(want.suspended_state)}, "
                    f"capacity {want.min_capacity}..{want.max_capacity}"
                )
    wanted = snapshot.wanted_capacity
    capacity = Capacity.of(clients, snapshot)
    where = capacity.describe()
    if wanted is not None:
        status, _, desired = capacity.counts()
        if status == "Missing" or desired is None:
            gone = "inference component" if snapshot.inference_component else "endpoint or variant"
            note(f"{where}: {gone} gone, capacity left alone")
        elif desired == wanted:
            note(f"{where}: desired {capacity.unit} already {wanted}")
        else:
            if status != "InService":
                log(
                    f"waiting for {where} to be InService before restoring its capacity "
                    "(signal again to stop waiting; the snapshot and lock are then kept for thaw)"
                )
                capacity.wait_in_service(
                    count=None, timeout_s=timeout_s, poll_s=poll_s, interrupted=interrupted
                )
            capacity.set(wanted)
            note(f"{where}: desired {capacity.unit} {desired} -> {wanted}")
    return done


def _flags(state: dict[str, bool]) -> str:
    return ", ".join(
        f"{flag}={str(state.get(flag, False)).lower()}" for flag in scaling.SUSPEND_FLAGS
    )


def _left_snapshot(
    path: Path, endpoint: str, component: str | None, artifacts_dir: Path
) -> FreezeSnapshot | None:
    try:
        return read_snapshot(path)
    except ArtifactError as exc:
        command = thaw_command(endpoint, component, artifacts_dir)
        raise InputError(f"{exc}; nothing was changed: delete it, then run `{command}`") from None


@contextlib.contextmanager
def freeze(
    clients: AwsClients,
    endpoint: str,
    *,
    artifacts_dir: Path,
    log: Log,
    component: str | None = None,
    force: bool = False,
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
) -> Iterator[FreezeSnapshot]:
    """Suspend the scaling and pin to one instance (or one copy of `component`); restore on exit.

    Refused before anything changes while another run holds the endpoint: its lock on the
    endpoint, a snapshot in this artifacts directory, or scaling already suspended. `force`
    takes over and restores, at the end, what the run it displaced had found.
    """
    path = snapshot_path(artifacts_dir, endpoint, component)
    left = _left_snapshot(path, endpoint, component, Path(artifacts_dir))
    with aws_errors():
        description = describe_endpoint(clients.sagemaker, endpoint)
        if description is None:
            raise InputError(f"endpoint {endpoint!r} not found: nothing to freeze")
        arn = str(description["EndpointArn"])
        locks = read_locks(clients.sagemaker, arn)
        snapshot = take_snapshot(clients, endpoint, description, component)
    snapshot = _claim(snapshot, locks, left, path, Path(artifacts_dir), force=force, log=log)
    save(snapshot, path)
    log(f"freeze snapshot written to {path}")
    mine = lock_of(snapshot, path)
    with aws_errors():
        _take_lock(clients, arn, mine, taken_over=locks if force else [], path=path, left=left)
    log(f"{endpoint}: locked for run {mine.run_id} (endpoint tags tts-bench:*:{mine.run_id})")
    failure: BaseException | None = None
    with sigterm_raises():
        try:
            with aws_errors():
                _apply_freeze(clients, snapshot, log=log, timeout_s=timeout_s, poll_s=poll_s)
            yield snapshot
        except BaseException as exc:
            failure = exc
            raise
        finally:
            _restore_on_exit(
                clients,
                snapshot,
                path,
                arn=arn,
                lock=mine,
                failure=failure,
                log=log,
                timeout_s=timeout_s,
                poll_s=poll_s,
            )


def _claim(
    snapshot: FreezeSnapshot,
    locks: list[FreezeLock],
    left: FreezeSnapshot | None,
    path: Path,
    artifacts_dir: Path,
    *,
    force: bool,
    log: Log,
) -> FreezeSnapshot:
    """The snapshot this run restores to; refuses (changing nothing) when the endpoint is held."""
    endpoint, component = snapshot.endpoint, snapshot.inference_component
    target = snapshot.target
    frozen = target is not None and all(
        target.suspended_state[flag]
        for flag in ("DynamicScalingInSuspended", "DynamicScalingOutSuspended")
    )
    if not force:
        if locks:
            holder = locks[0]
            raise InputError(
                f"{endpoint} is held by another run: {holder.describe()}, snapshot "
                f"{holder.snapshot or 'not recorded'}; nothing was changed. Expected no other run "
                f"on it: {lock_advice(holder, endpoint)}, or pass --force to take it over"
            )
        if left is not None:
            owner = lock_of(left, path)
            takeover = "" if owner.alive() is False else ", or pass --force to take it over"
            raise InputError(
                f"freeze snapshot {path} is already there, from {owner.describe()}; nothing was "
                f"changed. Expected none: {lock_advice(owner, endpoint, artifacts_dir)}{takeover}"
            )
        if frozen:
            assert target is not None
            raise InputError(
                f"{target.resource_id}: scaling is already suspended (in and out) and no run "
                "holds a lock; nothing was changed. A snapshot now would record the frozen state "
                f"as the one to restore: run `{thaw_command(endpoint, component)}` first to clear "
                "it, or pass --force to measure as it is (the restore then clears the suspension)"
            )
        return snapshot
    if locks and locks[0].restore is not None:
        values, whose = locks[0].restore, f"the lock of {locks[0].describe()}"
    elif left is not None:
        values, whose = restore_values(left), f"the snapshot {path}"
    elif frozen:
        values = replace(restore_values(snapshot), suspended=dict(scaling.NONE_SUSPENDED))
        whose = "nothing recorded, so the suspension is cleared"
    else:
        return snapshot
    log(f"--force: taking {endpoint} over; the restore puts back {values.tag()} ({whose})")
    return with_originals(snapshot, values)


def _take_lock(
    clients: AwsClients,
    arn: str,
    mine: FreezeLock,
    *,
    taken_over: list[FreezeLock],
    path: Path,
    left: FreezeSnapshot | None,
) -> None:
    """Tag, read back, and back off when another run tagged at the same moment."""
    write_lock(clients.sagemaker, arn, mine)
    displaced = {lock.run_id for lock in taken_over}
    others = [
        lock
        for lock in read_locks(clients.sagemaker, arn)
        if lock.run_id != mine.run_id and lock.run_id not in displaced
    ]
    if others:
        remove_lock(clients.sagemaker, arn, mine)
        if left is not None:
            save(left, path)
        else:
            path.unlink(missing_ok=True)
        raise InputError(
            f"another run locked the endpoint at the same moment: {others[0].describe()}; this "
            "run backed off and changed nothing. Expected one run at a time on an endpoint: "
            "run again once it is done"
        )
    for lock in taken_over:
        remove_lock(clients.sagemaker, arn, lock)
        file = lock_file(lock)
        if file is not None and file != path.resolve():
            file.unlink(missing_ok=True)


def _apply_freeze(
    clients: AwsClients, snapshot: FreezeSnapshot, *, log: Log, timeout_s: float, poll_s: float
) -> None:
    capacity = Capacity.of(clients, snapshot)
    where = capacity.describe()
    if snapshot.target is not None:
        scaling.register_suspended(
            clients.autoscaling, snapshot.target.resource_id, scaling.ALL_SUSPENDED
        )
        log(f"{snapshot.target.resource_id}: scaling suspended (in, out, scheduled)")
    else:
        log(f"{where}: no scalable target, nothing to suspend")
    capacity.wait_in_service(count=None, timeout_s=timeout_s, poll_s=poll_s)
    _, _, desired = capacity.counts()
    if desired != 1:
        capacity.set(1)
        log(f"{where}: desired {capacity.unit} {desired} -> 1, waiting for InService")
    capacity.wait_in_service(count=1, timeout_s=timeout_s, poll_s=poll_s)
    _verify_frozen(clients, snapshot)
    log(f"{where}: frozen at one {'copy' if snapshot.inference_component else 'instance'}")


def _verify_frozen(clients: AwsClients, snapshot: FreezeSnapshot) -> None:
    problems: list[str] = []
    if snapshot.target is not None:
        target = scaling.describe_target(clients.autoscaling, snapshot.target.resource_id)
        if target is None:
            problems.append("the scalable target disappeared")
        elif not all(scaling.suspended_state(target).values()):
            problems.append(f"SuspendedState is {_flags(scaling.suspended_state(target))}")
    status, current, desired = Capacity.of(clients, snapshot).counts()
    if (status, current, desired) != ("InService", 1, 1):
        what = "inference component" if snapshot.inference_component else "endpoint"
        problems.append(f"{what} is {status} with current={current} desired={desired}")
    if problems:
        raise FreezeError(f"{snapshot.endpoint} did not freeze: " + "; ".join(problems))


def _why(failure: BaseException | None) -> str:
    """What ended the frozen stretch, in words."""
    if failure is None:
        return "the measurement has ended"
    if isinstance(failure, Terminated):
        return str(failure)
    if isinstance(failure, KeyboardInterrupt):
        return "interrupted (SIGINT)"
    return f"the run stopped on an error ({type(failure).__name__}: {failure})"


def _restore_on_exit(
    clients: AwsClients,
    snapshot: FreezeSnapshot,
    path: Path,
    *,
    arn: str,
    lock: FreezeLock,
    failure: BaseException | None,
    log: Log,
    timeout_s: float,
    poll_s: float,
) -> None:
    with signals_held() as received:
        log(f"{snapshot.endpoint}: {_why(failure)}; restoring its scaling and capacity")
        try:
            with aws_errors():
                restore(
                    clients,
                    snapshot,
                    log=log,
                    timeout_s=timeout_s,
                    poll_s=poll_s,
                    interrupted=lambda: bool(received),
                )
                remove_lock(clients.sagemaker, arn, lock)
        except Exception as exc:
            command = thaw_command(snapshot.endpoint, snapshot.inference_component, path.parent)
            with contextlib.suppress(Exception), aws_errors():
                abandon_lock(clients.sagemaker, arn, lock)
            log(
                f"could not restore {snapshot.endpoint}: {exc}; the snapshot {path} and the lock "
                f"of run {lock.run_id} are kept: run `{command}`"
            )
            if failure is not None:
                return
            if received:
                raise Terminated(received[0], "during the restore") from exc
            raise RestoreError(f"{snapshot.endpoint}: restore failed: {exc}") from exc
        path.unlink(missing_ok=True)
        log(f"{snapshot.endpoint}: scaling restored, snapshot removed, lock released")
    if received and failure is None:
        raise Terminated(received[0], "during the restore")


def thaw(
    clients: AwsClients,
    endpoint: str,
    *,
    artifacts_dir: Path,
    log: Log,
    component: str | None = None,
    force: bool = False,
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
) -> list[str]:
    """Repair after a hard kill: restore everything the run recorded, from wherever it is.

    The lock on the endpoint says where: its snapshot file when that is on this machine, else
    the values in its tags; then a snapshot in `artifacts_dir`; with neither, every suspension
    is cleared. Refused while the locking run still runs (or may, on another host) unless
    `force`. Idempotent: on an endpoint that is not frozen it changes nothing and succeeds.
    """
    path = snapshot_path(artifacts_dir, endpoint, component)
    try:
        local = read_snapshot(path)
    except ArtifactError as exc:
        raise InputError(f"{exc}; delete it to thaw to all-unsuspended instead") from None
    done: list[str] = []

    def note(line: str) -> None:
        done.append(line)
        log(line)

    with aws_errors():
        description = describe_endpoint(clients.sagemaker, endpoint)
        arn = str(description["EndpointArn"]) if description else None
        locks = [
            lock
            for lock in (read_locks(clients.sagemaker, arn) if arn else [])
            if lock.component == component
        ]
        if not force:
            _refuse_live(locks, endpoint)
        variants = variant_states(description) if description else ()
        variant = variants[0].name if variants else local.variant if local else "AllTraffic"
        source, where = _thaw_source(locks, local, path, endpoint, variant)
        if source is not None:
            note(f"restoring {endpoint} from {where}")
            done += restore(clients, source, log=log, timeout_s=timeout_s, poll_s=poll_s)
        else:
            _clear_suspensions(clients, endpoint, component, note)
        for lock in locks:
            assert arn is not None
            remove_lock(clients.sagemaker, arn, lock)
            note(f"lock of run {lock.run_id} removed from {endpoint}")
    for file in {path, *(f for f in map(lock_file, locks) if f is not None)}:
        if file.exists():
            file.unlink()
            note(f"snapshot {file} removed")
    if not done:
        note(f"{endpoint}: nothing to thaw")
    return done


def _refuse_live(locks: list[FreezeLock], endpoint: str) -> None:
    for lock in locks:
        alive = lock.alive()
        if alive is False:
            continue
        if alive:
            raise InputError(
                f"{endpoint} is held by {lock.describe()}: thawing would change the endpoint "
                "under a live measurement; expected that run to end (its exit restores the "
                "endpoint) or to be stopped; pass --force to thaw anyway"
            )
        raise InputError(
            f"{endpoint} is held by {lock.describe()}, on another machine, so whether it still "
            f"runs cannot be told from here; {lock_advice(lock, endpoint)}"
        )


def _thaw_source(
    locks: list[FreezeLock],
    local: FreezeSnapshot | None,
    path: Path,
    endpoint: str,
    variant: str,
) -> tuple[FreezeSnapshot | None, str]:
    """The snapshot to restore from and where it was found; the oldest lock's comes first."""
    if locks:
        oldest = locks[0]
        if local is not None and local.run_id == oldest.run_id:
            return local, str(path)
        file = lock_file(oldest)
        if file is not None:
            try:
                found = read_snapshot(file)
            except ArtifactError:
                found = None
            if found is not None and found.run_id == oldest.run_id:
                return found, str(file)
        rebuilt = snapshot_from_lock(oldest, endpoint, variant)
        if rebuilt is not None:
            return rebuilt, (
                f"the lock tags of run {oldest.run_id} (its snapshot "
                f"{oldest.snapshot or 'file'} is not on this machine)"
            )
    return local, str(path)


def _clear_suspensions(
    clients: AwsClients, endpoint: str, component: str | None, note: Log
) -> None:
    """Without any record of what was there: every suspension of the endpoint cleared."""
    targets = (
        scaling.targets_for_resource(clients.autoscaling, scaling.component_resource_id(component))
        if component
        else scaling.targets_for_endpoint(clients.autoscaling, endpoint)
    )
    for target in targets:
        resource = target["ResourceId"]
        if any(scaling.suspended_state(target).values()):
            scaling.register_suspended(clients.autoscaling, resource, scaling.NONE_SUSPENDED)
            note(f"{resource}: no snapshot, SuspendedState cleared (all false)")
        else:
            note(f"{resource}: not suspended, left alone")
    if targets:
        note(f"{endpoint}: no snapshot, so no capacity to restore; left as it is")


def snapshot_age(snapshot: FreezeSnapshot, now: datetime) -> str:
    try:
        created = parse_iso(snapshot.created_at)
    except ValueError:
        return "unknown age"
    seconds = max(0.0, (now - created).total_seconds())
    return f"{seconds / 60:.0f} min old"
