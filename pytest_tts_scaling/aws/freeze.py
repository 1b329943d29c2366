"""Freeze an endpoint for a measurement and thaw it again, on every exit path (SPEC §4).

Order matters: the snapshot file is written (atomically) before anything changes, so a run killed
at any point leaves either nothing changed or a snapshot that `tts-bench thaw` restores from.
While frozen, SIGTERM raises :class:`Terminated` in the main thread, so the `finally` that
restores runs as it does for Ctrl-C; during the restore both signals are held back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_tts_scaling.artifacts import save
from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients, aws_errors
from pytest_tts_scaling.aws.fingerprint import describe_endpoint, variant_states
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


def snapshot_path(artifacts_dir: Path, endpoint: str) -> Path:
    return Path(artifacts_dir) / f".freeze-{endpoint}.json"


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
    clients: AwsClients, endpoint: str, description: dict[str, Any]
) -> FreezeSnapshot:
    states = variant_states(description)
    if not states:
        raise InputError(f"endpoint {endpoint!r} has no production variants to freeze")
    variant = states[0]
    resource = scaling.resource_id(endpoint, variant.name)
    target = scaling.describe_target(clients.autoscaling, resource)
    policies = [
        p
        for p in scaling.policies_for_endpoint(clients.autoscaling, endpoint)
        if p["ResourceId"] == resource
    ]
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
    def probe() -> bool | None:
        if interrupted():
            raise RestoreInterrupted(f"stopped waiting for {endpoint} to be InService")
        status, current, _ = _variant_counts(clients, endpoint, variant)
        if status in {"Failed", "Missing", "OutOfService", "Deleting"}:
            raise FreezeError(f"endpoint {endpoint} is {status}: cannot hold its capacity")
        if status == "InService" and (count is None or current == count):
            return True
        return None

    what = f"endpoint {endpoint} InService" + (f" with {count} instance(s)" if count else "")
    clients.clock.wait_for(probe, timeout_s=timeout_s, interval_s=poll_s, what=what)


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

    endpoint = snapshot.endpoint
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
    wanted = snapshot.desired_instance_count
    if restore_capacity and wanted is not None:
        status, _, desired = _variant_counts(clients, endpoint, snapshot.variant)
        if status == "Missing" or desired is None:
            note(f"{endpoint}/{snapshot.variant}: endpoint or variant gone, capacity left alone")
        elif desired == wanted:
            note(f"{endpoint}/{snapshot.variant}: desired instance count already {wanted}")
        else:
            if status != "InService":
                log(
                    f"waiting for {endpoint} to be InService before restoring its capacity "
                    "(signal again to stop waiting; the snapshot is then kept for thaw)"
                )
                _wait_in_service(
                    clients,
                    endpoint,
                    snapshot.variant,
                    count=None,
                    timeout_s=timeout_s,
                    poll_s=poll_s,
                    interrupted=interrupted,
                )
            clients.sagemaker.update_endpoint_weights_and_capacities(
                EndpointName=endpoint,
                DesiredWeightsAndCapacities=[
                    {"VariantName": snapshot.variant, "DesiredInstanceCount": wanted}
                ],
            )
            note(f"{endpoint}/{snapshot.variant}: desired instance count {desired} -> {wanted}")
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
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
) -> Iterator[FreezeSnapshot]:
    """Suspend the endpoint's scaling and pin it to one instance; restore everything on exit."""
    path = snapshot_path(artifacts_dir, endpoint)
    if path.exists():
        raise InputError(
            f"freeze snapshot {path} is left from an interrupted run: expected none; run "
            f"`tts-bench thaw --endpoint {endpoint} --artifacts-dir {artifacts_dir}` first"
        )
    with aws_errors():
        description = describe_endpoint(clients.sagemaker, endpoint)
        if description is None:
            raise InputError(f"endpoint {endpoint!r} not found: nothing to freeze")
        snapshot = take_snapshot(clients, endpoint, description)
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
    endpoint, variant = snapshot.endpoint, snapshot.variant
    if snapshot.target is not None:
        scaling.register_suspended(
            clients.autoscaling, snapshot.target.resource_id, scaling.ALL_SUSPENDED
        )
        log(f"{snapshot.target.resource_id}: scaling suspended (in, out, scheduled)")
    else:
        log(f"{endpoint}/{variant}: no scalable target, nothing to suspend")
    _wait_in_service(clients, endpoint, variant, count=None, timeout_s=timeout_s, poll_s=poll_s)
    _, _, desired = _variant_counts(clients, endpoint, variant)
    if desired != 1:
        clients.sagemaker.update_endpoint_weights_and_capacities(
            EndpointName=endpoint,
            DesiredWeightsAndCapacities=[{"VariantName": variant, "DesiredInstanceCount": 1}],
        )
        log(f"{endpoint}/{variant}: desired instance count {desired} -> 1, waiting for InService")
    _wait_in_service(clients, endpoint, variant, count=1, timeout_s=timeout_s, poll_s=poll_s)
    _verify_frozen(clients, snapshot)
    log(f"{endpoint}/{variant}: frozen at one instance")


def _verify_frozen(clients: AwsClients, snapshot: FreezeSnapshot) -> None:
    problems: list[str] = []
    if snapshot.target is not None:
        target = scaling.describe_target(clients.autoscaling, snapshot.target.resource_id)
        if target is None:
            problems.append("the scalable target disappeared")
        elif not all(scaling.suspended_state(target).values()):
            problems.append(f"SuspendedState is {_flags(scaling.suspended_state(target))}")
    status, current, desired = _variant_counts(clients, snapshot.endpoint, snapshot.variant)
    if (status, current, desired) != ("InService", 1, 1):
        problems.append(f"endpoint is {status} with current={current} desired={desired}")
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
            log(
                f"could not restore {snapshot.endpoint}: {exc}; the snapshot {path} is kept: run "
                f"`tts-bench thaw --endpoint {snapshot.endpoint} --restore-capacity`"
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
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
) -> list[str]:
    """Repair after a hard kill: restore from the snapshot, or clear every suspension if none.

    Idempotent: on an endpoint that is not frozen it changes nothing and succeeds. The snapshot
    is removed once everything in it is restored.
    """
    path = snapshot_path(artifacts_dir, endpoint)
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
            for target in scaling.targets_for_endpoint(clients.autoscaling, endpoint):
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
