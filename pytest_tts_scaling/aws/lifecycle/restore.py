"""Putting back what a freeze changed, as its snapshot recorded it: at the end of every run
and from `tts-bench thaw` after a kill.

The scaling flags and capacity limits come back before the instance (or copy) count, since they
are what leaves an endpoint unable to scale. Registering limits that leave the current count
outside them makes Application Auto Scaling move the count itself (RegisterScalableTarget's
documented behaviour), and a count set while that update runs is refused, or undone by it. So
the limits first come back widened to hold the current count, the count is restored, and only
then the limits are put back exactly, around a count they already hold: nothing races.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.lifecycle.capacity import IN_SERVICE_TIMEOUT_S, POLL_S, Capacity
from pytest_tts_scaling.aws.lifecycle.snapshot import FreezeSnapshot
from pytest_tts_scaling.core.progress import Progress


def restore(
    clients: AwsClients,
    snapshot: FreezeSnapshot,
    *,
    log: Progress,
    timeout_s: float = IN_SERVICE_TIMEOUT_S,
    poll_s: float = POLL_S,
    interrupted: Callable[[], bool] = lambda: False,
) -> list[str]:
    """Put back everything the snapshot recorded. Idempotent; a target that is gone is left alone.

    The scaling flags and capacity limits come back first (they are what leaves an endpoint
    unable to scale; limits that would exclude the current count are widened to hold it until
    the count is back), then the desired instance (or copy) count; SageMaker refuses that while
    the endpoint is updating, so it waits for InService first unless `interrupted()` says to
    stop waiting; then the exact limits. Returns what was done, one line each.
    """
    done: list[str] = []

    def note(line: str) -> None:
        done.append(line)
        log(line)

    wanted = snapshot.wanted_capacity
    capacity = Capacity.of(clients, snapshot)
    where = capacity.describe()
    status, _, desired = capacity.counts()
    # Limits still to put back once the count is restored (registered widened meanwhile).
    pending: tuple[int, int] | None = None

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
            final = (want.min_capacity, want.max_capacity)
            register = final
            if wanted is not None and desired is not None and desired != wanted:
                register = (min(final[0], desired), max(final[1], desired))
                pending = final if register != final else None
            if limits != register:
                changes.append(f"capacity {limits[0]}..{limits[1]} -> {register[0]}..{register[1]}")
            if pending is not None:
                changes.append(f"{final[0]}..{final[1]} once the {capacity.unit} is back")
            if changes:
                scaling.register_suspended(
                    clients.autoscaling,
                    resource,
                    want.suspended_state,
                    min_capacity=register[0] if limits != register else None,
                    max_capacity=register[1] if limits != register else None,
                )
                note(f"{resource}: " + "; ".join(changes))
            else:
                note(
                    f"{resource}: SuspendedState already "
                    f"{scaling.flags_text(want.suspended_state)}, "
                    f"capacity {want.min_capacity}..{want.max_capacity}"
                )
    if wanted is not None:
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
    if pending is not None and snapshot.target is not None:
        resource = snapshot.target.resource_id
        scaling.register_suspended(
            clients.autoscaling,
            resource,
            snapshot.target.suspended_state,
            min_capacity=pending[0],
            max_capacity=pending[1],
        )
        note(f"{resource}: capacity {pending[0]}..{pending[1]}")
    return done
