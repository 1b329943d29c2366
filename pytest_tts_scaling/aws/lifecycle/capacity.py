"""Capacity pinning: what a freeze holds at one, a variant's instances or a component's copies.

One interface over both kinds, so freeze, restore and the ttotal scale-out set a count and wait
for it the same way, bounded by the injected clients' clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.fingerprint import (
    TERMINAL_STATUSES,
    component_state,
    describe_component,
    describe_endpoint,
    variant_states,
)
from pytest_tts_scaling.aws.lifecycle.snapshot import FreezeSnapshot

# An update (scale to one, restore) has this long to come back InService, polled every POLL_S.
IN_SERVICE_TIMEOUT_S = 30 * 60.0
POLL_S = 15.0


class FreezeError(RuntimeError):
    """The endpoint did not reach the frozen state (the restore has run)."""


class RestoreInterrupted(RuntimeError):
    """A second signal arrived while the restore waited for the endpoint; the wait was cut."""


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
