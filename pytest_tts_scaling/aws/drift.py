"""drift: a read-only preflight of what is deployed for one endpoint (SPEC §4).

Findings carry a severity: an error blocks a measurement or a promotion, a warning is printed
and passes. No error means `preflight-ok`. Only Describe/Get calls are made here.

With an inference component the component's scaling is checked as well: its scalable target
(`inference-component/NAME`, dimension `sagemaker:inference-component:DesiredCopyCount`), its
policies (ConcurrentRequestsPerCopy, dimension InferenceComponentName), its status and copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients, aws_errors
from pytest_tts_scaling.aws.fingerprint import (
    ComponentState,
    component_state,
    describe_component,
    describe_endpoint,
    variant_states,
)
from pytest_tts_scaling.aws.freeze import (
    lock_advice,
    lock_of,
    read_snapshot,
    snapshot_age,
    snapshot_path,
    thaw_command,
)
from pytest_tts_scaling.aws.lock import read_locks
from pytest_tts_scaling.core.schema import PlanArtifact
from pytest_tts_scaling.errors import ArtifactError

Severity = Literal["error", "warn"]

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
class DriftFinding:
    check: str
    severity: Severity
    detail: str

    def line(self) -> str:
        return f"{self.severity}: {self.check}: {self.detail}"


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
            out.append(_orphaned_policy(policy))

    live_resources = {t["ResourceId"] for t in live_targets.values()}
    if component:
        found = _component_scaling(clients, component, copies, plan)
        out += found.findings
        policies += found.policies
        target_keys |= {(t["ResourceId"], t["ScalableDimension"]) for t in found.targets}
        if found.live:
            live_resources.add(scaling.component_resource_id(component))
        for policy in found.policies:
            if (policy["ResourceId"], policy["ScalableDimension"]) not in target_keys:
                out.append(_orphaned_policy(policy))

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
        out += _suspension(resource, live)
        out += _capacity(resource, live, state.desired_instance_count, plan)

    out += _inert(clients, endpoint, policies, alarms, live_resources, lookback_s)
    out += _insufficient_data(endpoint, policies, alarms, component)
    return out


def _orphaned_policy(policy: dict[str, Any]) -> DriftFinding:
    return DriftFinding(
        "orphaned_policy",
        "error",
        f"policy {policy['PolicyName']} on {policy['ResourceId']}: no scalable target; delete it",
    )


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


@dataclass(frozen=True)
class _ComponentScaling:
    targets: list[dict[str, Any]]
    policies: list[dict[str, Any]]
    live: bool
    findings: list[DriftFinding]


def _component_scaling(
    clients: AwsClients, component: str, copies: ComponentState | None, plan: PlanArtifact | None
) -> _ComponentScaling:
    """Target, policies and findings of the component's own scaling (its copies)."""
    resource = scaling.component_resource_id(component)
    targets = scaling.targets_for_resource(clients.autoscaling, resource)
    policies = scaling.policies_for_resource(clients.autoscaling, resource)
    findings: list[DriftFinding] = []
    if copies is None:
        findings += [
            DriftFinding(
                "orphaned_target",
                "error",
                f"{t['ResourceId']}: scalable target for an inference component that does not "
                "exist; deregister it",
            )
            for t in targets
        ]
        return _ComponentScaling(targets, policies, False, findings)
    if not targets:
        findings.append(
            DriftFinding(
                "missing_target",
                "warn",
                f"{resource}: no scalable target, the component's copies never scale"
                + (f" (plan asks for {plan.min_instances}..{plan.max_instances})" if plan else ""),
            )
        )
        return _ComponentScaling(targets, policies, False, findings)
    target = targets[0]
    findings += _suspension(resource, target)
    findings += _capacity(resource, target, copies.desired_copy_count, plan, unit="copy count")
    return _ComponentScaling(targets, policies, True, findings)


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


def _suspension(resource: str, target: dict[str, Any]) -> list[DriftFinding]:
    state = scaling.suspended_state(target)
    suspended = [flag for flag, on in state.items() if on]
    if not suspended:
        return []
    severity: Severity = "error" if state["DynamicScalingOutSuspended"] else "warn"
    return [
        DriftFinding(
            "suspended_scaling",
            severity,
            f"{resource}: {', '.join(suspended)} = true"
            + ("; the endpoint cannot scale out" if severity == "error" else ""),
        )
    ]


def _capacity(
    resource: str,
    target: dict[str, Any],
    desired: int | None,
    plan: PlanArtifact | None,
    unit: str = "instance count",
) -> list[DriftFinding]:
    out: list[DriftFinding] = []
    low, high = target["MinCapacity"], target["MaxCapacity"]
    if desired is not None and not low <= desired <= high:
        out.append(
            DriftFinding(
                "capacity_mismatch",
                "warn",
                f"{resource}: desired {unit} {desired} is outside the target's {low}..{high}",
            )
        )
    if plan is not None and (low, high) != (plan.min_instances, plan.max_instances):
        out.append(
            DriftFinding(
                "capacity_mismatch",
                "warn",
                f"{resource}: target capacity {low}..{high}, the plan for {plan.model} says "
                f"{plan.min_instances}..{plan.max_instances}",
            )
        )
    return out


def _inert(
    clients: AwsClients,
    endpoint: str,
    policies: list[dict[str, Any]],
    alarms: list[dict[str, Any]],
    live_resources: set[str],
    lookback_s: float,
) -> list[DriftFinding]:
    out: list[DriftFinding] = []
    end = clients.clock.now()
    start = end - timedelta(seconds=lookback_s)
    period = max(60, math.ceil(lookback_s / 60) * 60)
    seen: dict[scaling.MetricRef, bool] = {}
    for policy in policies:
        if policy["ResourceId"] not in live_resources:
            continue  # reported as orphaned
        variant = scaling.variant_of(policy["ResourceId"], endpoint) or ""
        metrics = scaling.policy_metrics(policy, alarms, endpoint, variant)
        if not metrics and policy.get("PolicyType") == "StepScaling":
            out.append(
                DriftFinding(
                    "inert_policy",
                    "warn",
                    f"policy {policy['PolicyName']}: no alarm invokes this step-scaling policy",
                )
            )
        for metric in metrics:
            key = scaling.MetricRef(metric.namespace, metric.name, metric.dimensions, "")
            if key not in seen:
                seen[key] = _has_datapoints(clients, metric, start, end, period)
            if not seen[key]:
                out.append(
                    DriftFinding(
                        "inert_policy",
                        "warn",
                        f"{metric.source}: metric {metric.describe()} has no datapoints in "
                        f"the last {lookback_s / 3600:g} h, so the policy cannot act",
                    )
                )
    return out


def _has_datapoints(
    clients: AwsClients, metric: scaling.MetricRef, start: Any, end: Any, period: int
) -> bool:
    response = clients.cloudwatch.get_metric_statistics(
        Namespace=metric.namespace,
        MetricName=metric.name,
        Dimensions=[{"Name": k, "Value": v} for k, v in metric.dimensions],
        StartTime=start,
        EndTime=end,
        Period=period,
        Statistics=["SampleCount"],
    )
    return bool(response.get("Datapoints"))


def _insufficient_data(
    endpoint: str,
    policies: list[dict[str, Any]],
    alarms: list[dict[str, Any]],
    component: str | None = None,
) -> list[DriftFinding]:
    related: dict[str, dict[str, Any]] = {}
    for policy in policies:
        for alarm in scaling.alarms_for_policy(policy, alarms):
            related[alarm["AlarmName"]] = alarm
    for alarm in scaling.alarms_for_endpoint(alarms, endpoint):
        related[alarm["AlarmName"]] = alarm
    if component:
        for alarm in scaling.alarms_for_component(alarms, component):
            related[alarm["AlarmName"]] = alarm
    first_chunk = scaling.first_chunk_alarm(alarms, endpoint, component)
    if first_chunk is not None:
        related[first_chunk["AlarmName"]] = first_chunk
    return [
        DriftFinding(
            "alarm_insufficient_data",
            "warn",
            f"alarm {name} is INSUFFICIENT_DATA: its metric has no recent data"
            + (f" ({alarm['StateReason']})" if alarm.get("StateReason") else ""),
        )
        for name, alarm in sorted(related.items())
        if alarm.get("StateValue") == "INSUFFICIENT_DATA"
    ]
