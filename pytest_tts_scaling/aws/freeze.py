"""Freeze an endpoint for a measurement and thaw it again, on every exit path (SPEC §4).

Order matters: the snapshot file is written (atomically) before anything changes, so a run killed
at any point leaves either nothing changed or a snapshot that `tts-bench thaw` restores from.
While frozen, SIGTERM raises :class:`Terminated` in the main thread, so the `finally` that
restores runs as it does for Ctrl-C; during the restore both signals are held back.

With an inference component the component is frozen instead of the variant: its scalable target
(`inference-component/NAME`) is suspended and its copies are pinned to one with
UpdateInferenceComponentRuntimeConfig.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_tts_scaling.artifacts import save
from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients, aws_errors
from pytest_tts_scaling.aws.fingerprint import (
    component_state,
    describe_component,
    describe_endpoint,
    variant_states,
)
from pytest_tts_scaling.errors import ArtifactError, InputError

FREEZE_SCHEMA = "tts-scaling/freeze/1"
IN_SERVICE_TIMEOUT_S = 30 * 60.0
POLL_S = 15.0

Log = Callable[[str], None]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while frozen; pytest and asyncio stop for it as they do for Ctrl-C."""


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


def thaw_command(endpoint: str, component: str | None, artifacts_dir: Path | None = None) -> str:
    where = f" --artifacts-dir {artifacts_dir}" if artifacts_dir is not None else ""
    which = f" --inference-component {component}" if component else ""
    return f"tts-bench thaw --endpoint {endpoint}{which}{where}"


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
        created_at=clients.clock.now().astimezone(UTC).isoformat(),
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
    )


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """For the duration, SIGTERM raises Terminated; the previous handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise Terminated(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """SIGTERM and SIGINT are recorded, not acted on, so a second signal cannot cut a restore."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGTERM, signal.SIGINT)}
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
            status, current, _ = self.counts()
            if status in {"Failed", "Missing", "OutOfService", "Deleting"}:
                raise FreezeError(f"{where} is {status}: cannot hold its capacity")
            if status == "InService" and (count is None or current == count):
                return True
            return None

        what = f"{where} InService" + (f" with {self.unit} {count}" if count else "")
        self.clients.clock.wait_for(probe, timeout_s=timeout_s, interval_s=poll_s, what=what)


def _wait_in_service(
    clients: AwsClients,
    endpoint: str,
    variant: str,
    *,
    count: int | None,
    timeout_s: float,
    poll_s: float,
    interrupted: Callable[[], bool] = lambda: False,
) -> None:
    Capacity(clients, endpoint, variant).wait_in_service(
        count=count, timeout_s=timeout_s, poll_s=poll_s, interrupted=interrupted
    )


def restore(
    clients: AwsClients,
    snapshot: FreezeSnapshot,
    *,
    restore_capacity: bool,
    log: Log,
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
    interrupted: Callable[[], bool] = lambda: False,
) -> list[str]:
    """Put back what the snapshot recorded. Idempotent; a target that is gone is left alone.

    The scaling flags come back first (they are what leaves an endpoint unable to scale), then,
    when asked, the desired instance count; SageMaker refuses that while the endpoint is
    updating, so it waits for InService first unless `interrupted()` says to stop waiting.
    Returns what was done, one line each.
    """
    done: list[str] = []

    def note(line: str) -> None:
        done.append(line)
        log(line)

    if snapshot.target is not None:
        resource = snapshot.target.resource_id
        current = scaling.describe_target(clients.autoscaling, resource)
        if current is None:
            note(f"{resource}: scalable target no longer exists, left alone")
        elif scaling.suspended_state(current) != snapshot.target.suspended_state:
            scaling.register_suspended(
                clients.autoscaling, resource, snapshot.target.suspended_state
            )
            note(
                f"{resource}: SuspendedState restored to {_flags(snapshot.target.suspended_state)}"
            )
        else:
            note(f"{resource}: SuspendedState already {_flags(snapshot.target.suspended_state)}")
    wanted = snapshot.wanted_capacity
    capacity = Capacity.of(clients, snapshot)
    where = capacity.describe()
    if restore_capacity and wanted is not None:
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
                    "(signal again to stop waiting; the snapshot is then kept for thaw)"
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


@contextlib.contextmanager
def freeze(
    clients: AwsClients,
    endpoint: str,
    *,
    artifacts_dir: Path,
    log: Log,
    component: str | None = None,
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
) -> Iterator[FreezeSnapshot]:
    """Suspend the scaling and pin to one instance (or one copy of `component`); restore on exit."""
    path = snapshot_path(artifacts_dir, endpoint, component)
    if path.exists():
        raise InputError(
            f"freeze snapshot {path} is left from an interrupted run: expected none; run "
            f"`{thaw_command(endpoint, component, artifacts_dir)}` first"
        )
    with aws_errors():
        description = describe_endpoint(clients.sagemaker, endpoint)
        if description is None:
            raise InputError(f"endpoint {endpoint!r} not found: nothing to freeze")
        snapshot = take_snapshot(clients, endpoint, description, component)
    save(snapshot, path)
    log(f"freeze snapshot written to {path}")
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
                failure=failure,
                log=log,
                timeout_s=timeout_s,
                poll_s=poll_s,
            )


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


def _restore_on_exit(
    clients: AwsClients,
    snapshot: FreezeSnapshot,
    path: Path,
    *,
    failure: BaseException | None,
    log: Log,
    timeout_s: float,
    poll_s: float,
) -> None:
    with signals_held() as received:
        try:
            with aws_errors():
                restore(
                    clients,
                    snapshot,
                    restore_capacity=True,
                    log=log,
                    timeout_s=timeout_s,
                    poll_s=poll_s,
                    interrupted=lambda: bool(received),
                )
        except Exception as exc:
            command = thaw_command(snapshot.endpoint, snapshot.inference_component)
            log(
                f"could not restore {snapshot.endpoint}: {exc}; the snapshot {path} is kept: run "
                f"`{command} --restore-capacity`"
            )
            if failure is not None:
                return
            if received:
                raise Terminated(f"signal {received[0]} during restore") from exc
            raise RestoreError(f"{snapshot.endpoint}: restore failed: {exc}") from exc
        path.unlink(missing_ok=True)
        log(f"{snapshot.endpoint}: scaling restored, snapshot removed")
    if received and failure is None:
        raise Terminated(f"signal {received[0]} during restore")


def thaw(
    clients: AwsClients,
    endpoint: str,
    *,
    artifacts_dir: Path,
    restore_capacity: bool,
    log: Log,
    component: str | None = None,
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
) -> list[str]:
    """Repair after a hard kill: restore from the snapshot, or clear every suspension if none.

    Idempotent: on an endpoint that is not frozen it changes nothing and succeeds. The snapshot
    is removed once everything in it is restored. With `component`, the inference component's
    snapshot and scalable target are the ones thawed.
    """
    path = snapshot_path(artifacts_dir, endpoint, component)
    try:
        snapshot = read_snapshot(path)
    except ArtifactError as exc:
        raise InputError(f"{exc}; delete it to thaw to all-unsuspended instead") from None
    done: list[str] = []
    with aws_errors():
        if snapshot is not None:
            log(f"restoring {endpoint} from {path}")
            done += restore(
                clients,
                snapshot,
                restore_capacity=restore_capacity,
                log=log,
                timeout_s=timeout_s,
                poll_s=poll_s,
            )
        else:
            targets = (
                scaling.targets_for_resource(
                    clients.autoscaling, scaling.component_resource_id(component)
                )
                if component
                else scaling.targets_for_endpoint(clients.autoscaling, endpoint)
            )
            for target in targets:
                resource = target["ResourceId"]
                if any(scaling.suspended_state(target).values()):
                    scaling.register_suspended(
                        clients.autoscaling, resource, scaling.NONE_SUSPENDED
                    )
                    line = f"{resource}: no snapshot, SuspendedState cleared (all false)"
                else:
                    line = f"{resource}: not suspended, left alone"
                log(line)
                done.append(line)
            if restore_capacity:
                line = f"{endpoint}: no snapshot, so no capacity to restore; left as it is"
                log(line)
                done.append(line)
    if snapshot is not None:
        path.unlink(missing_ok=True)
        log(f"snapshot {path} removed")
    if not done:
        line = f"{endpoint}: nothing to thaw"
        log(line)
        done.append(line)
    return done


def snapshot_age(snapshot: FreezeSnapshot, now: datetime) -> str:
    try:
        created = datetime.fromisoformat(snapshot.created_at)
    except ValueError:
        return "unknown age"
    seconds = max(0.0, (now - created).total_seconds())
    return f"{seconds / 60:.0f} min old"
