"""drift's checks of the scaling itself: targets, policies, suspension, capacity and alarms.

Each check reads what `run_drift` (:mod:`pytest_tts_scaling.aws.checks.drift`) has described and
returns its findings; only the metric check calls AWS (GetMetricStatistics, read-only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.fingerprint import ComponentState
from pytest_tts_scaling.core.schema import PlanArtifact

Severity = Literal["error", "warn"]


@dataclass(frozen=True)
class DriftFinding:
    check: str
    severity: Severity
    detail: str

    def line(self) -> str:
        return f"{self.severity}: {self.check}: {self.detail}"


def orphaned_policy(policy: dict[str, Any]) -> DriftFinding:
    return DriftFinding(
        "orphaned_policy",
        "error",
        f"policy {policy['PolicyName']} on {policy['ResourceId']}: no scalable target; delete it",
    )


@dataclass(frozen=True)
class ComponentScaling:
    targets: list[dict[str, Any]]
    policies: list[dict[str, Any]]
    live: bool
    findings: list[DriftFinding]


def component_scaling(
    clients: AwsClients, component: str, copies: ComponentState | None, plan: PlanArtifact | None
) -> ComponentScaling:
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
        return ComponentScaling(targets, policies, False, findings)
    if not targets:
        findings.append(
            DriftFinding(
                "missing_target",
                "warn",
                f"{resource}: no scalable target, the component's copies never scale"
                + (f" (plan asks for {plan.min_instances}..{plan.max_instances})" if plan else ""),
            )
        )
        return ComponentScaling(targets, policies, False, findings)
    target = targets[0]
    findings += suspension(resource, target)
    findings += capacity(resource, target, copies.desired_copy_count, plan, unit="copy count")
    return ComponentScaling(targets, policies, True, findings)


def suspension(resource: str, target: dict[str, Any]) -> list[DriftFinding]:
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


def capacity(
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


def inert_policies(
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


def insufficient_data(
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
