"""Reading what Application Auto Scaling and CloudWatch hold for one endpoint.

SageMaker variants scale in the `sagemaker` namespace with ResourceId
`endpoint/NAME/variant/VARIANT` and dimension `sagemaker:variant:DesiredInstanceCount`; an
inference component scales its copies, ResourceId `inference-component/NAME` and dimension
`sagemaker:inference-component:DesiredCopyCount`, and its server-side concurrency metric is
`ConcurrentRequestsPerCopy` (dimension InferenceComponentName). :class:`ScalingScope` names which
of the two a run measures. Everything here reads; the only writer is :func:`register_suspended`
(freeze and thaw).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
COMPONENT_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
COMPONENT_PREFIX = "inference-component/"
SUSPEND_FLAGS = (
    "DynamicScalingInSuspended",
    "DynamicScalingOutSuspended",
    "ScheduledScalingSuspended",
)
ALL_SUSPENDED = dict.fromkeys(SUSPEND_FLAGS, True)
NONE_SUSPENDED = dict.fromkeys(SUSPEND_FLAGS, False)

# Predefined target-tracking metrics and the CloudWatch metric each one reads.
PREDEFINED_METRICS = {
    "SageMakerVariantConcurrentRequestsPerModelHighResolution": "ConcurrentRequestsPerModel",
    "SageMakerVariantInvocationsPerInstance": "InvocationsPerInstance",
    "SageMakerVariantProvisionedConcurrencyUtilization": (
        "ServerlessProvisionedConcurrencyUtilization"
    ),
    "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution": (
        "ConcurrentRequestsPerCopy"
    ),
    "SageMakerInferenceComponentInvocationsPerCopy": "InvocationsPerCopy",
}
CONCURRENCY_METRIC = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
COMPONENT_CONCURRENCY_METRIC = "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
# Predefined metrics published every 10 s; the others every 60 s.
HIGH_RESOLUTION_METRICS = frozenset({CONCURRENCY_METRIC, COMPONENT_CONCURRENCY_METRIC})
FIRST_CHUNK_ALARM = "FirstChunkLatencyP95"


def resource_id(endpoint: str, variant: str) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


def component_resource_id(component: str) -> str:
    return f"{COMPONENT_PREFIX}{component}"


def component_of(resource: str) -> str | None:
    """`inference-component/NAME` → `NAME`, else None."""
    return resource[len(COMPONENT_PREFIX) :] if resource.startswith(COMPONENT_PREFIX) else None


def dimension_for(resource: str) -> str:
    """The scalable dimension of a ResourceId: copies for a component, else instances."""
    return COMPONENT_DIMENSION if component_of(resource) is not None else DIMENSION


@dataclass(frozen=True)
class ScalingScope:
    """What a run scales and measures: an endpoint's variant, or one inference component on it."""

    endpoint: str
    variant: str
    component: str | None = None

    @property
    def resource_id(self) -> str:
        if self.component:
            return component_resource_id(self.component)
        return resource_id(self.endpoint, self.variant)

    @property
    def dimension(self) -> str:
        return dimension_for(self.resource_id)

    @property
    def metric(self) -> str:
        """The CloudWatch concurrency metric (AWS/SageMaker, 10 s, statistic Maximum)."""
        return "ConcurrentRequestsPerCopy" if self.component else "ConcurrentRequestsPerModel"

    @property
    def metric_dimensions(self) -> list[dict[str, str]]:
        if self.component:
            return [{"Name": "InferenceComponentName", "Value": self.component}]
        return [
            {"Name": "EndpointName", "Value": self.endpoint},
            {"Name": "VariantName", "Value": self.variant},
        ]

    @property
    def concurrency_policy_metric(self) -> str:
        """The predefined target-tracking metric that follows :attr:`metric`."""
        return COMPONENT_CONCURRENCY_METRIC if self.component else CONCURRENCY_METRIC

    @property
    def unit(self) -> str:
        return "copy" if self.component else "instance"

    def describe(self) -> str:
        if self.component:
            return f"inference component {self.component} of {self.endpoint}"
        return f"{self.endpoint}/{self.variant}"


def variant_of(resource: str, endpoint: str) -> str | None:
    """`endpoint/NAME/variant/V` → `V` when NAME is `endpoint`, else None."""
    prefix = f"endpoint/{endpoint}/variant/"
    return resource[len(prefix) :] if resource.startswith(prefix) else None


def suspended_state(target: dict[str, Any]) -> dict[str, bool]:
    """All three flags; a flag the service leaves out is not suspended."""
    state = target.get("SuspendedState") or {}
    return {flag: bool(state.get(flag, False)) for flag in SUSPEND_FLAGS}


def flags_text(state: dict[str, bool]) -> str:
    """A SuspendedState as the log lines print it: every flag, false when left out."""
    return ", ".join(f"{flag}={str(state.get(flag, False)).lower()}" for flag in SUSPEND_FLAGS)


def _paginate(client: Any, operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        items.extend(page.get(key, []))
    return items


def targets_for_endpoint(autoscaling: Any, endpoint: str) -> list[dict[str, Any]]:
    """Every scalable target in the namespace whose ResourceId names this endpoint."""
    targets = _paginate(
        autoscaling, "describe_scalable_targets", "ScalableTargets", ServiceNamespace=NAMESPACE
    )
    return [t for t in targets if variant_of(t["ResourceId"], endpoint) is not None]


def policies_for_endpoint(autoscaling: Any, endpoint: str) -> list[dict[str, Any]]:
    policies = _paginate(
        autoscaling, "describe_scaling_policies", "ScalingPolicies", ServiceNamespace=NAMESPACE
    )
    return [p for p in policies if variant_of(p["ResourceId"], endpoint) is not None]


def targets_for_resource(autoscaling: Any, resource: str) -> list[dict[str, Any]]:
    found = autoscaling.describe_scalable_targets(
        ServiceNamespace=NAMESPACE, ResourceIds=[resource]
    ).get("ScalableTargets", [])
    return [t for t in found if t["ResourceId"] == resource]


def policies_for_resource(autoscaling: Any, resource: str) -> list[dict[str, Any]]:
    policies = _paginate(
        autoscaling,
        "describe_scaling_policies",
        "ScalingPolicies",
        ServiceNamespace=NAMESPACE,
        ResourceId=resource,
    )
    return [p for p in policies if p["ResourceId"] == resource]


def describe_target(autoscaling: Any, resource: str) -> dict[str, Any] | None:
    found = autoscaling.describe_scalable_targets(
        ServiceNamespace=NAMESPACE,
        ResourceIds=[resource],
        ScalableDimension=dimension_for(resource),
    ).get("ScalableTargets", [])
    return next((t for t in found if t["ResourceId"] == resource), None)


def register_suspended(
    autoscaling: Any,
    resource: str,
    state: dict[str, bool],
    *,
    min_capacity: int | None = None,
    max_capacity: int | None = None,
) -> None:
    """Set the three SuspendedState flags, and the capacity limits when given."""
    limits = {
        key: value
        for key, value in (("MinCapacity", min_capacity), ("MaxCapacity", max_capacity))
        if value is not None
    }
    autoscaling.register_scalable_target(
        ServiceNamespace=NAMESPACE,
        ResourceId=resource,
        ScalableDimension=dimension_for(resource),
        SuspendedState={flag: bool(state.get(flag, False)) for flag in SUSPEND_FLAGS},
        **limits,
    )


def all_alarms(cloudwatch: Any) -> list[dict[str, Any]]:
    return _paginate(cloudwatch, "describe_alarms", "MetricAlarms")


def alarms_for_policy(policy: dict[str, Any], alarms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Alarms the policy lists, plus alarms whose actions invoke it (moto lists none itself)."""
    names = {a.get("AlarmName") for a in policy.get("Alarms", [])}
    arn = policy.get("PolicyARN")
    return [a for a in alarms if a["AlarmName"] in names or arn in a.get("AlarmActions", [])]


def alarm_dimensions(alarm: dict[str, Any]) -> dict[str, str]:
    return {d["Name"]: d["Value"] for d in alarm.get("Dimensions", [])}


def alarms_for_endpoint(alarms: list[dict[str, Any]], endpoint: str) -> list[dict[str, Any]]:
    """Alarms on the endpoint's metrics (an EndpointName dimension naming it)."""
    return [a for a in alarms if alarm_dimensions(a).get("EndpointName") == endpoint]


def alarms_for_component(alarms: list[dict[str, Any]], component: str) -> list[dict[str, Any]]:
    """Alarms on an inference component's metrics (an InferenceComponentName dimension)."""
    return [a for a in alarms if alarm_dimensions(a).get("InferenceComponentName") == component]


def is_scale_in_step(policy: dict[str, Any]) -> bool:
    """A step-scaling policy whose adjustments remove capacity."""
    if policy.get("PolicyType") != "StepScaling":
        return False
    steps = policy.get("StepScalingPolicyConfiguration", {}).get("StepAdjustments", [])
    return any(step.get("ScalingAdjustment", 0) < 0 for step in steps)


def first_chunk_alarm(
    alarms: list[dict[str, Any]], endpoint: str, component: str | None = None
) -> dict[str, Any] | None:
    """The FirstChunkLatencyP95 alarm of this endpoint (or of its inference component).

    Preferred: one whose dimensions or name mention the component, then the endpoint; else the
    only such alarm.
    """
    candidates = [a for a in alarms if FIRST_CHUNK_ALARM in a["AlarmName"]]
    for name in (component, endpoint):
        if not name:
            continue
        mine = [
            a for a in candidates if name in a["AlarmName"] or name in alarm_dimensions(a).values()
        ]
        if mine:
            return mine[0]
    return candidates[0] if len(candidates) == 1 else None


@dataclass(frozen=True)
class MetricRef:
    """A CloudWatch metric a policy or alarm reads."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    source: str

    def describe(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in self.dimensions)
        return f"{self.namespace} {self.name} [{dims}]"


def policy_metrics(
    policy: dict[str, Any], alarms: list[dict[str, Any]], endpoint: str, variant: str
) -> list[MetricRef]:
    """The metrics a policy acts on: its target-tracking metric, or its alarms' metrics.

    A predefined metric of a policy on `inference-component/NAME` is read per component.
    """
    name = policy["PolicyName"]
    component = component_of(str(policy.get("ResourceId", "")))
    dims: tuple[tuple[str, str], ...] = (
        (("InferenceComponentName", component),)
        if component is not None
        else (("EndpointName", endpoint), ("VariantName", variant))
    )
    out: list[MetricRef] = []
    tracking = policy.get("TargetTrackingScalingPolicyConfiguration")
    if tracking:
        predefined = tracking.get("PredefinedMetricSpecification")
        custom = tracking.get("CustomizedMetricSpecification")
        if predefined and predefined.get("PredefinedMetricType") in PREDEFINED_METRICS:
            metric = PREDEFINED_METRICS[predefined["PredefinedMetricType"]]
            out.append(MetricRef("AWS/SageMaker", metric, dims, f"policy {name}"))
        elif custom and custom.get("MetricName") and custom.get("Namespace"):
            custom_dims = tuple((d["Name"], d["Value"]) for d in custom.get("Dimensions", []))
            out.append(
                MetricRef(custom["Namespace"], custom["MetricName"], custom_dims, f"policy {name}")
            )
    for alarm in alarms_for_policy(policy, alarms):
        if alarm.get("MetricName") and alarm.get("Namespace"):
            out.append(
                MetricRef(
                    alarm["Namespace"],
                    alarm["MetricName"],
                    tuple(alarm_dimensions(alarm).items()),
                    f"alarm {alarm['AlarmName']} of policy {name}",
                )
            )
    return out
