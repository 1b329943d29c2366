"""drift: a read-only preflight of what is deployed for one endpoint (docs/steps.md#drift).

Findings carry a severity: an error blocks a measurement or a promotion, a warning is printed
and passes. No error means `preflight-ok`. Only Describe/Get calls are made here.

With an inference component the component's scaling is checked as well: its scalable target
(`inference-component/NAME`, dimension `sagemaker:inference-component:DesiredCopyCount`), its
policies (ConcurrentRequestsPerCopy, dimension InferenceComponentName), its status and copies.
The checks of the scaling itself are in :mod:`pytest_tts_scaling.aws.checks.drift_scaling`; the
endpoint's status and what a freeze may have left behind (snapshot, lock) are checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.checks.drift_scaling import (
    DriftFinding,
    capacity,
    component_scaling,
    inert_policies,
    insufficient_data,
    orphaned_policy,
    suspension,
)
from pytest_tts_scaling.aws.clients import AwsClients, aws_errors
from pytest_tts_scaling.aws.fingerprint import (
    ComponentState,
    component_state,
    describe_component,
    describe_endpoint,
    variant_states,
)
from pytest_tts_scaling.aws.lifecycle.lock import read_locks
from pytest_tts_scaling.aws.lifecycle.snapshot import (
    lock_advice,
    lock_of,
    read_snapshot,
    snapshot_age,
    snapshot_path,
    thaw_command,
)
from pytest_tts_scaling.core.schema import PlanArtifact
from pytest_tts_scaling.errors import ArtifactError

DRIFT_CHECKS = (
    "endpoint_status",
    "freeze_snapshot",
    "freeze_lock",
    "orphaned_target",
    "orphaned_policy",
    "suspended_scaling",
    "missing_target",
    "capacity_mismatch",
    "inert_policy",
    "alarm_insufficient_data",
)
# How far back a policy's metric must show a datapoint for the policy to count as alive.
DEFAULT_LOOKBACK_S = 24 * 3600.0


@dataclass(frozen=True)
class DriftReport:
    endpoint: str
    findings: tuple[DriftFinding, ...]

    @property
    def errors(self) -> list[DriftFinding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[DriftFinding]:
        return [f for f in self.findings if f.severity == "warn"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def for_check(self, check: str) -> list[DriftFinding]:
        return [f for f in self.findings if f.check == check]

    def lines(self) -> list[str]:
        out = [f.line() for f in self.findings]
        if self.ok:
            out.append("preflight-ok")
        else:
            out.append(f"preflight-failed: {len(self.errors)} error(s) on {self.endpoint}")
        return out


def run_drift(
    clients: AwsClients,
    endpoint: str,
    *,
    artifacts_dir: Path,
    plan: PlanArtifact | None = None,
    lookback_s: float = DEFAULT_LOOKBACK_S,
    component: str | None = None,
) -> DriftReport:
    """Compare the deployed endpoint, its scaling and its alarms with what they should be.

    With `component`, its scaling is what the plan's capacity is held against.
    """
    with aws_errors():
        return DriftReport(
            endpoint,
            tuple(_findings(clients, endpoint, artifacts_dir, plan, lookback_s, component)),
        )


def _findings(
    clients: AwsClients,
    endpoint: str,
    artifacts_dir: Path,
    plan: PlanArtifact | None,
    lookback_s: float,
    component: str | None = None,
) -> list[DriftFinding]:
    out: list[DriftFinding] = []
    description = describe_endpoint(clients.sagemaker, endpoint)
    if description is None:
        out.append(DriftFinding("endpoint_status", "error", f"endpoint {endpoint} not found"))
        variants: dict[str, Any] = {}
    else:
        status = description.get("EndpointStatus")
        if status != "InService":
            reason = description.get("FailureReason")
            out.append(
                DriftFinding(
                    "endpoint_status",
                    "error",
                    f"endpoint {endpoint} is {status}, expected InService"
                    + (f" ({reason})" if reason else ""),
                )
            )
        variants = {v.name: v for v in variant_states(description)}
    copies = _component_status(clients, endpoint, component, out) if component else None
    out += _snapshot_findings(clients, endpoint, artifacts_dir)
    if component:
        out += _snapshot_findings(clients, endpoint, artifacts_dir, component)
    if description is not None:
        out += _lock_findings(clients, endpoint, str(description["EndpointArn"]))

    targets = scaling.targets_for_endpoint(clients.autoscaling, endpoint)
    policies = scaling.policies_for_endpoint(clients.autoscaling, endpoint)
    alarms = scaling.all_alarms(clients.cloudwatch)
    live_targets: dict[str, dict[str, Any]] = {}
    for target in targets:
        variant = scaling.variant_of(target["ResourceId"], endpoint)
        if variant in variants:
            live_targets[str(variant)] = target
        else:
            out.append(
                DriftFinding(
                    "orphaned_target",
                    "error",
                    f"{target['ResourceId']}: scalable target for a variant the endpoint does not "
                    "have; deregister it",
                )
            )
    target_keys = {(t["ResourceId"], t["ScalableDimension"]) for t in targets}
    for policy in policies:
        if (policy["ResourceId"], policy["ScalableDimension"]) not in target_keys:
            out.append(orphaned_policy(policy))

    live_resources = {t["ResourceId"] for t in live_targets.values()}
    if component:
        found = component_scaling(clients, component, copies, plan)
        out += found.findings
        policies += found.policies
        target_keys |= {(t["ResourceId"], t["ScalableDimension"]) for t in found.targets}
        if found.live:
            live_resources.add(scaling.component_resource_id(component))
        for policy in found.policies:
            if (policy["ResourceId"], policy["ScalableDimension"]) not in target_keys:
                out.append(orphaned_policy(policy))

    for name, state in variants.items():
        live = live_targets.get(name)
        resource = scaling.resource_id(endpoint, name)
        if live is None and component:
            continue  # the component's copies are what scales; its target is checked above
        if live is None:
            out.append(
                DriftFinding(
                    "missing_target",
                    "warn",
                    f"{resource}: no scalable target, the variant never scales"
                    + (
                        f" (plan asks for {plan.min_instances}..{plan.max_instances})"
                        if plan
                        else ""
                    ),
                )
            )
            continue
        out += suspension(resource, live)
        out += capacity(resource, live, state.desired_instance_count, plan)

    out += inert_policies(clients, endpoint, policies, alarms, live_resources, lookback_s)
    out += insufficient_data(endpoint, policies, alarms, component)
    return out


def _component_status(
    clients: AwsClients, endpoint: str, component: str, out: list[DriftFinding]
) -> ComponentState | None:
    """The component's state; a missing, foreign or not-InService component is an error."""
    found = describe_component(clients.sagemaker, component)
    if found is None:
        out.append(
            DriftFinding("endpoint_status", "error", f"inference component {component} not found")
        )
        return None
    state = component_state(found)
    if state.endpoint != endpoint:
        out.append(
            DriftFinding(
                "endpoint_status",
                "error",
                f"inference component {component} runs on endpoint {state.endpoint}, not "
                f"{endpoint}",
            )
        )
    elif state.status != "InService":
        reason = found.get("FailureReason")
        out.append(
            DriftFinding(
                "endpoint_status",
                "error",
                f"inference component {component} is {state.status}, expected InService"
                + (f" ({reason})" if reason else ""),
            )
        )
    return state


def _snapshot_findings(
    clients: AwsClients, endpoint: str, artifacts_dir: Path, component: str | None = None
) -> list[DriftFinding]:
    path = snapshot_path(artifacts_dir, endpoint, component)
    if not path.exists():
        return []
    try:
        snapshot = read_snapshot(path)
    except ArtifactError as exc:
        thaw = thaw_command(endpoint, component, artifacts_dir, force=True)
        return [DriftFinding("freeze_snapshot", "error", f"{exc}; delete it, then run `{thaw}`")]
    if snapshot is None:
        return []
    owner = lock_of(snapshot, path)
    age = snapshot_age(snapshot, clients.clock.now())
    state = "belongs to a run still measuring" if owner.alive() else "was left by a run"
    return [
        DriftFinding(
            "freeze_snapshot",
            "error",
            f"{path} {state}: {owner.describe()}, {age}; scaling may be suspended and capacity "
            f"pinned: {lock_advice(owner, endpoint, artifacts_dir)}",
        )
    ]


def _lock_findings(clients: AwsClients, endpoint: str, arn: str) -> list[DriftFinding]:
    """Every run's freeze lock on the endpoint: a live one, and one whose run is gone."""
    out: list[DriftFinding] = []
    for lock in read_locks(clients.sagemaker, arn):
        what = f"inference component {lock.component} of {endpoint}" if lock.component else endpoint
        held = "is frozen by" if lock.alive() is not False else "is still locked by"
        out.append(
            DriftFinding(
                "freeze_lock",
                "error",
                f"{what} {held} {lock.describe()}, snapshot {lock.snapshot or 'not recorded'}: "
                f"{lock_advice(lock, endpoint)}",
            )
        )
    return out
