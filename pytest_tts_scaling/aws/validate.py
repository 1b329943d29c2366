"""validate: every deployed scaling value against the plan artifact (SPEC §4). Read-only.

With an inference component the values are its own: the scalable target on
`inference-component/NAME` (copies), the policy tracking ConcurrentRequestsPerCopy, and
QUEUE_MAX_DEPTH from the component's environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import AwsClients, aws_errors
from pytest_tts_scaling.aws.fingerprint import read_deployment
from pytest_tts_scaling.schema import PlanArtifact

Value = float | int | str | None

VALIDATE_FIELDS = (
    "min_capacity",
    "max_capacity",
    "target_value",
    "scale_out_cooldown_s",
    "scale_in_threshold",
    "scale_in_cooldown_s",
    "queue_max_depth",
    "first_chunk_alarm_ms",
)
# Which plan field each deployed value is held against.
PLAN_FIELDS = {
    "min_capacity": "min_instances",
    "max_capacity": "max_instances",
    "target_value": "scaling_target_value",
    "scale_out_cooldown_s": "scale_out_cooldown_s",
    "scale_in_threshold": "scale_in_threshold",
    "scale_in_cooldown_s": "scale_in_cooldown_s",
    "queue_max_depth": "queue_max_depth",
    "first_chunk_alarm_ms": "first_chunk_alarm_ms",
}
# Where each deployed value is read from, for the message when it is missing.
SOURCES = {
    "min_capacity": "scalable target MinCapacity",
    "max_capacity": "scalable target MaxCapacity",
    "target_value": "target-tracking policy TargetValue",
    "scale_out_cooldown_s": "target-tracking policy ScaleOutCooldown",
    "scale_in_threshold": "scale-in step policy's alarm Threshold",
    "scale_in_cooldown_s": "scale-in step policy Cooldown",
    "queue_max_depth": "model environment QUEUE_MAX_DEPTH",
    "first_chunk_alarm_ms": "FirstChunkLatencyP95 alarm Threshold",
}


@dataclass(frozen=True)
class FieldCheck:
    field: str
    deployed: Value
    planned: Value
    source: str

    @property
    def ok(self) -> bool:
        if isinstance(self.deployed, int | float) and isinstance(self.planned, int | float):
            return math.isclose(self.deployed, self.planned, rel_tol=1e-6, abs_tol=1e-9)
        return False

    def line(self) -> str:
        deployed = "missing" if self.deployed is None else _fmt(self.deployed)
        verdict = "ok" if self.ok else "MISMATCH"
        planned = _fmt(self.planned)
        return f"{verdict} {self.field}: deployed {deployed}, planned {planned} ({self.source})"


def _fmt(value: Value) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class DeployedScaling:
    """The scaling values as deployed for an endpoint's primary variant; None where absent."""

    endpoint: str
    variant: str
    values: dict[str, Value]
    component: str | None = None


def read_deployed_scaling(
    clients: AwsClients, endpoint: str, component: str | None = None
) -> DeployedScaling:
    with aws_errors():
        deployment = read_deployment(clients.sagemaker, endpoint, component)
        scope = scaling.ScalingScope(endpoint, deployment.variant, component)
        resource = scope.resource_id
        target = scaling.describe_target(clients.autoscaling, resource)
        if component:
            policies = scaling.policies_for_resource(clients.autoscaling, resource)
        else:
            policies = [
                p
                for p in scaling.policies_for_endpoint(clients.autoscaling, endpoint)
                if p["ResourceId"] == resource
            ]
        alarms = scaling.all_alarms(clients.cloudwatch)
    values: dict[str, Value] = dict.fromkeys(VALIDATE_FIELDS)
    if target is not None:
        values["min_capacity"] = target["MinCapacity"]
        values["max_capacity"] = target["MaxCapacity"]
    tracking = _target_tracking(policies, scope.concurrency_policy_metric)
    if tracking is not None:
        config = tracking["TargetTrackingScalingPolicyConfiguration"]
        values["target_value"] = config.get("TargetValue")
        values["scale_out_cooldown_s"] = config.get("ScaleOutCooldown")
    step = next((p for p in policies if scaling.is_scale_in_step(p)), None)
    if step is not None:
        values["scale_in_cooldown_s"] = step["StepScalingPolicyConfiguration"].get("Cooldown")
        step_alarms = scaling.alarms_for_policy(step, alarms)
        if step_alarms:
            values["scale_in_threshold"] = step_alarms[0].get("Threshold")
    depth = deployment.container_env.get("QUEUE_MAX_DEPTH")
    if depth is not None:
        values["queue_max_depth"] = _number(depth)
    first_chunk = scaling.first_chunk_alarm(alarms, endpoint, component)
    if first_chunk is not None:
        values["first_chunk_alarm_ms"] = first_chunk.get("Threshold")
    return DeployedScaling(endpoint, deployment.variant, values, component)


def _target_tracking(
    policies: list[dict[str, Any]], metric: str = scaling.CONCURRENCY_METRIC
) -> dict[str, Any] | None:
    tracking = [p for p in policies if p.get("PolicyType") == "TargetTrackingScaling"]
    on_concurrency = [
        p
        for p in tracking
        if p["TargetTrackingScalingPolicyConfiguration"]
        .get("PredefinedMetricSpecification", {})
        .get("PredefinedMetricType")
        == metric
    ]
    chosen = on_concurrency or tracking
    return chosen[0] if chosen else None


def _number(raw: str) -> Value:
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw


def compare(deployed: DeployedScaling, plan: PlanArtifact) -> list[FieldCheck]:
    """One check per field, in a fixed order; a missing deployed value is a mismatch."""
    return [
        FieldCheck(
            field=name,
            deployed=deployed.values.get(name),
            planned=getattr(plan, PLAN_FIELDS[name]),
            source=SOURCES[name],
        )
        for name in VALIDATE_FIELDS
    ]


def run_validate(
    clients: AwsClients, endpoint: str, plan: PlanArtifact, component: str | None = None
) -> list[FieldCheck]:
    return compare(read_deployed_scaling(clients, endpoint, component), plan)
