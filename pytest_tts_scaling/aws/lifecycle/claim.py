"""Claiming an endpoint for one run, before a freeze changes anything.

A second run is refused while another holds the endpoint: its lock tags, a snapshot left in
this artifacts directory, or scaling already suspended. `--force` takes over and restores, at
the end, what the displaced run had found. The lock is write-then-read: a run that sees another
run's tags appear at the same moment backs off and leaves things as they were.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pytest_tts_scaling.artifacts import save
from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.lifecycle.lock import FreezeLock, read_locks, remove_lock, write_lock
from pytest_tts_scaling.aws.lifecycle.snapshot import (
    FreezeSnapshot,
    lock_advice,
    lock_file,
    lock_of,
    read_snapshot,
    restore_values,
    thaw_command,
    with_originals,
)
from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import ArtifactError, InputError

# How a refusal names the takeover, for pytest and tts-bench alike.
FORCE = both_flags("--force")


def left_snapshot(
    path: Path, endpoint: str, component: str | None, artifacts_dir: Path
) -> FreezeSnapshot | None:
    """A snapshot an earlier run left at `path`; a damaged one stops the run, changing nothing."""
    try:
        return read_snapshot(path)
    except ArtifactError as exc:
        command = thaw_command(endpoint, component, artifacts_dir)
        raise InputError(f"{exc}; nothing was changed: delete it, then run `{command}`") from None


def claim(
    snapshot: FreezeSnapshot,
    locks: list[FreezeLock],
    left: FreezeSnapshot | None,
    path: Path,
    artifacts_dir: Path,
    *,
    force: bool,
    log: Progress,
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
                f"on it: {lock_advice(holder, endpoint)}, or pass {FORCE} to take it over "
                "(docs/steps.md#the-freeze-lock)"
            )
        if left is not None:
            owner = lock_of(left, path)
            takeover = "" if owner.alive() is False else f", or pass {FORCE} to take it over"
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
                f"it, or pass {FORCE} to measure as it is (the restore then clears the suspension)"
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


def take_lock(
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
