"""Putting back what a freeze changed, as its snapshot recorded it: at the end of every run
and from `tts-bench thaw` after a kill.

The scaling flags and capacity limits come back before the instance (or copy) count, since they
are what leaves an endpoint unable to scale.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.capacity import (
    ADJUST_GRACE_S,
    IN_SERVICE_TIMEOUT_S,
    POLL_S,
    Capacity,
)
from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.snapshot import FreezeSnapshot

Log = Callable[[str], None]


def restore(
    clients: AwsClients,
    snapshot: FreezeSnapshot,
    *,
    log: Log,
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
    interrupted: Callable[[], bool] = lambda: False,
    grace_s: float = ADJUST_GRACE_S,
) -> list[str]:
    """Put back everything the snapshot recorded. Idempotent; a target that is gone is left alone.

    The scaling flags and capacity limits come back first (they are what leaves an endpoint
    unable to scale), then the desired instance (or copy) count; SageMaker refuses that while
    the endpoint is updating, so it waits for InService first unless `interrupted()` says to
    stop waiting. Limits put back around a count outside them make Application Auto Scaling
    move the count itself, so the restore first waits for that update to finish
    (:meth:`Capacity.wait_within`). Returns what was done, one line each.
    """
    done: list[str] = []
    registered: tuple[int, int] | None = None

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
                changes.append(
                    f"SuspendedState restored to {scaling.flags_text(want.suspended_state)}"
                )
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
                if moved:
                    registered = (want.min_capacity, want.max_capacity)
                note(f"{resource}: " + "; ".join(changes))
            else:
                note(
                    f"{resource}: SuspendedState already "
                    f"{scaling.flags_text(want.suspended_state)}, "
                    f"capacity {want.min_capacity}..{want.max_capacity}"
                )
    wanted = snapshot.wanted_capacity
    capacity = Capacity.of(clients, snapshot)
    where = capacity.describe()
    if wanted is not None:
        status, _, desired = capacity.counts()
        if registered is not None and desired is not None and status != "Missing":
            low, high = registered
            if not low <= desired <= high:
                log(
                    f"waiting for Application Auto Scaling to bring {where} within {low}..{high} "
                    "before restoring its capacity"
                )
                status, _, desired = capacity.wait_within(
                    low,
                    high,
                    grace_s=grace_s,
                    timeout_s=timeout_s,
                    poll_s=poll_s,
                    interrupted=interrupted,
                )
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
