"""Freeze an endpoint for a measurement and thaw it again, on every exit path
(docs/steps.md#the-freeze-lock).

Order matters: the snapshot file (:mod:`.snapshot`) is written atomically before anything
changes. Then the run claims the endpoint (:mod:`.claim`, :mod:`.lock`): a second run, from
any machine or artifacts directory, is refused before it changes anything, and thaw finds what
to restore from the lock alone. Stop signals end in the restore
(:mod:`pytest_tts_scaling.aws.lifecycle.signals`), which puts back what the snapshot recorded
(:mod:`pytest_tts_scaling.aws.lifecycle.restore`).

With an inference component the component is frozen instead of the variant: its scalable target
(`inference-component/NAME`) is suspended and its copies are pinned to one with
UpdateInferenceComponentRuntimeConfig (:mod:`pytest_tts_scaling.aws.lifecycle.capacity`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from pytest_tts_scaling.artifacts import save
from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients, aws_errors
from pytest_tts_scaling.aws.fingerprint import describe_endpoint, variant_states
from pytest_tts_scaling.aws.lifecycle.capacity import (
    IN_SERVICE_TIMEOUT_S,
    POLL_S,
    Capacity,
    FreezeError,
)
from pytest_tts_scaling.aws.lifecycle.claim import claim, left_snapshot, take_lock
from pytest_tts_scaling.aws.lifecycle.lock import FreezeLock, abandon_lock, read_locks, remove_lock
from pytest_tts_scaling.aws.lifecycle.restore import restore
from pytest_tts_scaling.aws.lifecycle.signals import Terminated, signals_held, sigterm_raises
from pytest_tts_scaling.aws.lifecycle.snapshot import (
    FreezeSnapshot,
    lock_advice,
    lock_file,
    lock_of,
    read_snapshot,
    snapshot_from_lock,
    snapshot_path,
    take_snapshot,
    thaw_command,
)
from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.errors import ArtifactError, InputError


class RestoreError(RuntimeError):
    """Scaling could not be fully restored; the snapshot is kept for `tts-bench thaw`."""


@contextlib.contextmanager
def freeze(
    clients: AwsClients,
    endpoint: str,
    *,
    artifacts_dir: Path,
    log: Progress,
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
    left = left_snapshot(path, endpoint, component, Path(artifacts_dir))
    with aws_errors():
        description = describe_endpoint(clients.sagemaker, endpoint)
        if description is None:
            raise InputError(f"endpoint {endpoint!r} not found: nothing to freeze")
        arn = str(description["EndpointArn"])
        locks = read_locks(clients.sagemaker, arn)
        snapshot = take_snapshot(clients, endpoint, description, component)
    snapshot = claim(snapshot, locks, left, path, Path(artifacts_dir), force=force, log=log)
    save(snapshot, path)
    log(f"freeze snapshot written to {path}")
    mine = lock_of(snapshot, path)
    with aws_errors():
        take_lock(clients, arn, mine, taken_over=locks if force else [], path=path, left=left)
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


def _apply_freeze(
    clients: AwsClients, snapshot: FreezeSnapshot, *, log: Progress, timeout_s: float, poll_s: float
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
            problems.append(
                f"SuspendedState is {scaling.flags_text(scaling.suspended_state(target))}"
            )
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
    log: Progress,
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
    log: Progress,
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
    clients: AwsClients, endpoint: str, component: str | None, note: Progress
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
