"""validate: every deployed scaling value against the plan artifact (docs/steps.md#validate).
Read-only.

Beyond the plan's numbers, the shape of the policy the plan means is checked too: target
tracking on the concurrency metric that never scales in (DisableScaleIn), and a step policy that
removes one instance on its own alarm, which reads the same metric with the statistic, period
and evaluation periods the thresholds were computed for (Maximum, 10 s, 3).

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
from pytest_tts_scaling.core.schema import PlanArtifact

Value = float | int | str | bool | None

VALIDATE_FIELDS = (
    "min_capacity",
    "max_capacity",
    "target_metric",
    "target_value",
    "disable_scale_in",
    "scale_out_cooldown_s",
    "scale_in_step",
    "scale_in_metric",
    "scale_in_statistic",
    "scale_in_period_s",
    "scale_in_periods",
    "scale_in_comparison",
    "scale_in_threshold",
    "scale_in_cooldown_s",
    "queue_max_depth",
    "first_chunk_alarm_ms",
)
# Which plan field each deployed value is held against; the others are what the plan means by
# its policy (target tracking that only scales out, a step policy on its own alarm that removes
# one instance at a time), the same for every plan.
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
SCALE_IN_STEP = "ChangeInCapacity -1 at or below the threshold"
# Where each deployed value is read from, for the message when it is missing.
SOURCES = {
    "min_capacity": "scalable target MinCapacity",
    "max_capacity": "scalable target MaxCapacity",
    "target_metric": "target-tracking policy PredefinedMetricType",
    "target_value": "target-tracking policy TargetValue",
    "disable_scale_in": "target-tracking policy DisableScaleIn",
    "scale_out_cooldown_s": "target-tracking policy ScaleOutCooldown",
    "scale_in_step": "scale-in step policy AdjustmentType and StepAdjustments",
    "scale_in_metric": "scale-in step policy's alarm Namespace, MetricName and Dimensions",
    "scale_in_statistic": "scale-in step policy's alarm Statistic",
    "scale_in_period_s": "scale-in step policy's alarm Period",
    "scale_in_periods": "scale-in step policy's alarm EvaluationPeriods",
    "scale_in_comparison": "scale-in step policy's alarm ComparisonOperator",
    "scale_in_threshold": "scale-in step policy's alarm Threshold",
    "scale_in_cooldown_s": "scale-in step policy Cooldown",
    "queue_max_depth": "model environment QUEUE_MAX_DEPTH",
    "first_chunk_alarm_ms": "FirstChunkLatencyP95 alarm Threshold",
}


def planned_values(plan: PlanArtifact, scope: scaling.ScalingScope) -> dict[str, Value]:
    """What each field should be: the plan's numbers, and the policy shape the plan assumes."""
    from pytest_tts_scaling.core.plan import ALARM_PERIOD_S, ALARM_PERIODS

    metric = scaling.MetricRef(
        "AWS/SageMaker",
        scope.metric,
        tuple((d["Name"], d["Value"]) for d in scope.metric_dimensions),
        "",
    )
    shape: dict[str, Value] = {
        "target_metric": scope.concurrency_policy_metric,
        "disable_scale_in": True,
        "scale_in_step": SCALE_IN_STEP,
        "scale_in_metric": metric.describe(),
        "scale_in_statistic": "Maximum",
        "scale_in_period_s": int(ALARM_PERIOD_S),
        "scale_in_periods": ALARM_PERIODS,
        "scale_in_comparison": "LessThanOrEqualToThreshold",
    }
    return {
        name: getattr(plan, PLAN_FIELDS[name]) if name in PLAN_FIELDS else shape[name]
        for name in VALIDATE_FIELDS
    }


@dataclass(frozen=True)
class FieldCheck:
    field: str
    deployed: Value
    planned: Value
    source: str

    @property
    def ok(self) -> bool:
        if isinstance(self.deployed, bool) or isinstance(self.planned, bool):
            return self.deployed is self.planned
        if isinstance(self.deployed, int | float) and isinstance(self.planned, int | float):
            return math.isclose(self.deployed, self.planned, rel_tol=1e-6, abs_tol=1e-9)
        return self.deployed is not None and self.deployed == self.planned

    def line(self) -> str:
        deployed = "missing" if self.deployed is None else _fmt(self.deployed)
        verdict = "ok" if self.ok else "MISMATCH"
        planned = _fmt(self.planned)
        return f"{verdict} {self.field}: deployed {deployed}, planned {planned} ({self.source})"


def _fmt(value: Value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
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
    values.update(_tracking_values(policies, scope.concurrency_policy_metric))
    step = next((p for p in policies if scaling.is_scale_in_step(p)), None)
    if step is not None:
        config = step["StepScalingPolicyConfiguration"]
        values["scale_in_cooldown_s"] = config.get("Cooldown")
        values["scale_in_step"] = _step_shape(config)
        values.update(_alarm_values(scaling.alarms_for_policy(step, alarms)))
    depth = deployment.container_env.get("QUEUE_MAX_DEPTH")
    if depth is not None:
        values["queue_max_depth"] = _number(depth)
    first_chunk = scaling.first_chunk_alarm(alarms, endpoint, component)
    if first_chunk is not None:
        values["first_chunk_alarm_ms"] = first_chunk.get("Threshold")
    return DeployedScaling(endpoint, deployment.variant, values, component)


def _tracking_values(policies: list[dict[str, Any]], metric: str) -> dict[str, Value]:
    """The target-tracking policy on `metric`; with none, the first other one names its metric.

    Any other tracking policy's target value and cooldown are never compared as if they were
    the concurrency policy's: only its metric is reported, and that mismatches.
    """
    tracking = [p for p in policies if p.get("PolicyType") == "TargetTrackingScaling"]
    if not tracking:
        return {}

    def metric_of(policy: dict[str, Any]) -> str:
        config = policy["TargetTrackingScalingPolicyConfiguration"]
        predefined = config.get("PredefinedMetricSpecification") or {}
        custom = config.get("CustomizedMetricSpecification") or {}
        return str(
            predefined.get("PredefinedMetricType")
            or f"customized {custom.get('Namespace')} {custom.get('MetricName')}"
        )

    mine = next((p for p in tracking if metric_of(p) == metric), None)
    if mine is None:
        return {"target_metric": metric_of(tracking[0])}
    config = mine["TargetTrackingScalingPolicyConfiguration"]
    return {
        "target_metric": metric,
        "target_value": config.get("TargetValue"),
        "disable_scale_in": bool(config.get("DisableScaleIn", False)),
        "scale_out_cooldown_s": config.get("ScaleOutCooldown"),
    }


def _step_shape(config: dict[str, Any]) -> str:
    """The scale-in steps in words; the plan's shape reads as :data:`SCALE_IN_STEP`."""
    steps = config.get("StepAdjustments") or []
    kind = config.get("AdjustmentType", "?")
    if len(steps) == 1 and steps[0].get("MetricIntervalUpperBound") == 0:
        return f"{kind} {steps[0].get('ScalingAdjustment')} at or below the threshold"
    return f"{kind} " + ", ".join(
        f"{s.get('ScalingAdjustment')} for ({s.get('MetricIntervalLowerBound', '-inf')}, "
        f"{s.get('MetricIntervalUpperBound', 'inf')}]"
        for s in steps
    )


def _alarm_values(alarms: list[dict[str, Any]]) -> dict[str, Value]:
    """What the scale-in alarm watches and when it fires; a low-side alarm is preferred."""
    if not alarms:
        return {}
    alarm = next(
        (a for a in alarms if str(a.get("ComparisonOperator", "")).startswith("Less")), alarms[0]
    )
    metric = (
        scaling.MetricRef(
            alarm["Namespace"],
            alarm["MetricName"],
            tuple(sorted(scaling.alarm_dimensions(alarm).items(), key=_dimension_order)),
            "",
        ).describe()
        if alarm.get("MetricName") and alarm.get("Namespace")
        else "metric math (expected one metric)"
    )
    return {
        "scale_in_metric": metric,
        "scale_in_statistic": alarm.get("Statistic") or alarm.get("ExtendedStatistic"),
        "scale_in_period_s": alarm.get("Period"),
        "scale_in_periods": alarm.get("EvaluationPeriods"),
        "scale_in_comparison": alarm.get("ComparisonOperator"),
        "scale_in_threshold": alarm.get("Threshold"),
    }


def _dimension_order(item: tuple[str, str]) -> int:
    """EndpointName before VariantName, as the scope lists them; others after."""
    order = ("EndpointName", "VariantName", "InferenceComponentName")
    return order.index(item[0]) if item[0] in order else len(order)


def _number(raw: str) -> Value:
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw


def compare_deployed(deployed: DeployedScaling, plan: PlanArtifact) -> list[FieldCheck]:
    """One check per field, in a fixed order; a missing deployed value is a mismatch."""
    scope = scaling.ScalingScope(deployed.endpoint, deployed.variant, deployed.component)
    planned = planned_values(plan, scope)
    return [
        FieldCheck(
            field=name,
            deployed=deployed.values.get(name),
            planned=planned[name],
            source=SOURCES[name],
        )
        for name in VALIDATE_FIELDS
    ]


def run_validate(
    clients: AwsClients, endpoint: str, plan: PlanArtifact, component: str | None = None
) -> list[FieldCheck]:
    return compare_deployed(read_deployed_scaling(clients, endpoint, component), plan)
