"""Putting back what a freeze changed, as its snapshot recorded it: at the end of every run
and from `tts-bench thaw` after a kill.

The scaling flags and capacity limits come back before the instance (or copy) count, since they
are what leaves an endpoint unable to scale.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.capacity import IN_SERVICE_TIMEOUT_S, POLL_S, Capacity
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
