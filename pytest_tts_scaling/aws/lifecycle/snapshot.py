"""The freeze snapshot: what a freeze changes, as it was, written before the first change.

A run killed at any point leaves either nothing changed or a snapshot that `tts-bench thaw` restores
from. The snapshot and the lock (:mod:`.lock`) carry the same restore values, so either one is
enough to put the endpoint back.
"""

from __future__ import annotations

import json
import os
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_tts_scaling.artifacts import load
from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.fingerprint import component_state, describe_component, variant_states
from pytest_tts_scaling.aws.lifecycle.lock import FreezeLock, RestoreValues, new_run_id, this_host
from pytest_tts_scaling.core.timeline import iso, parse_iso
from pytest_tts_scaling.errors import ArtifactError, InputError

FREEZE_SCHEMA: Final = "tts-scaling/freeze/1"


class TargetSnapshot(BaseModel):
    model_config = ConfigDict(extra="allow")

    resource_id: str
    min_capacity: int
    max_capacity: int
    suspended_state: dict[str, bool]


class FreezeSnapshot(BaseModel):
    """What freeze changes, as it was before: written before the first change."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_: Literal["tts-scaling/freeze/1"] = Field(alias="schema", default=FREEZE_SCHEMA)
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
        return load(path, FreezeSnapshot)
    except ArtifactError:
        if not path.exists():
            return None
        raise


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


def snapshot_age(snapshot: FreezeSnapshot, now: datetime) -> str:
    try:
        created = parse_iso(snapshot.created_at)
    except ValueError:
        return "unknown age"
    seconds = max(0.0, (now - created).total_seconds())
    return f"{seconds / 60:.0f} min old"
