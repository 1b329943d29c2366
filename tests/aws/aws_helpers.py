"""Building SageMaker deployments on moto, a fake clock, and a recorder of AWS operations."""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pytest_tts_scaling.aws.clients import Clock
from pytest_tts_scaling.core.schema import PlanArtifact
from tests import factories

ROLE = "arn:aws:iam::123456789012:role/speech-execution"
DIGEST = "sha256:8b1b96bc" + "0" * 56
IMAGE = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/speech-kokoro@{DIGEST}"
NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
TT_METRIC = "SageMakerVariantConcurrentRequestsPerModelHighResolution"


# Variables of the user's own AWS setup that must not leak into a run against moto.
USER_AWS_VARIABLES = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
)


def moto_environment(moto_url: str, empty_config: str) -> dict[str, str]:
    """boto3's standard chain pointed at moto, with fake credentials and no config file."""
    return {
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": empty_config,
        "AWS_SHARED_CREDENTIALS_FILE": empty_config,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def client(service: str) -> Any:
    """A boto3 client for the current AWS environment (moto), built once per endpoint URL."""
    return _client(service, os.environ.get("AWS_ENDPOINT_URL", ""))


@functools.cache
def _client(service: str, endpoint_url: str) -> Any:
    import boto3  # here: the folder's conftest imports this module, with or without the extra

    return boto3.client(service)


def unique(prefix: str = "speech") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class FakeClock:
    """Monotonic time that only moves when something sleeps; `now` follows it."""

    def __init__(self, start: datetime | None = None, on_sleep: Any = None):
        self.t = 0.0
        self.start = start or datetime.now(UTC)
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)

    def clock(self) -> Clock:
        return Clock(monotonic=self.monotonic, sleep=self.sleep, now=self.now)


@dataclass
class Deployed:
    endpoint: str
    variant: str = "AllTraffic"
    tt_policy_arn: str | None = None
    step_policy_arn: str | None = None
    alarms: list[str] = field(default_factory=list)

    @property
    def resource_id(self) -> str:
        return f"endpoint/{self.endpoint}/variant/{self.variant}"


def deploy(
    endpoint: str,
    *,
    instances: int = 2,
    instance_type: str = "ml.g4dn.xlarge",
    image: str = IMAGE,
    env: dict[str, str] | None = None,
    target: bool = True,
    min_capacity: int = 1,
    max_capacity: int = 4,
    tracking: bool = True,
    tt_metric: str = TT_METRIC,
    disable_scale_in: bool = True,
    target_value: float = 37.5,
    scale_out_cooldown: int = 30,
    step: bool = True,
    step_alarm: bool = True,
    scale_in_adjustment: int = -1,
    scale_in_metric: str = "ConcurrentRequestsPerModel",
    scale_in_statistic: str = "Maximum",
    scale_in_period: int = 10,
    scale_in_periods: int = 3,
    scale_in_comparison: str = "LessThanOrEqualToThreshold",
    scale_in_threshold: float = 25.0,
    scale_in_cooldown: int = 960,
    first_chunk_alarm: bool = True,
    first_chunk_ms: float = 65.0,
    metric_data: bool = True,
) -> Deployed:
    """An endpoint shaped like infra's SpeechEndpointStack + EndpointAutoscaling, on moto."""
    sm = client("sagemaker")
    model = f"{endpoint}-model"
    sm.create_model(
        ModelName=model,
        ExecutionRoleArn=ROLE,
        PrimaryContainer={
            "Image": image,
            "Environment": {"QUEUE_MAX_DEPTH": "50"} if env is None else env,
        },
    )
    sm.create_endpoint_config(
        EndpointConfigName=f"{endpoint}-config",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": model,
                "InitialInstanceCount": instances,
                "InstanceType": instance_type,
            }
        ],
    )
    sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=f"{endpoint}-config")
    deployed = Deployed(endpoint)
    aas = client("application-autoscaling")
    cw = client("cloudwatch")
    dims = [
        {"Name": "EndpointName", "Value": endpoint},
        {"Name": "VariantName", "Value": deployed.variant},
    ]
    if target:
        aas.register_scalable_target(
            ServiceNamespace=NAMESPACE,
            ResourceId=deployed.resource_id,
            ScalableDimension=DIMENSION,
            MinCapacity=min_capacity,
            MaxCapacity=max_capacity,
        )
    if tracking:
        deployed.tt_policy_arn = aas.put_scaling_policy(
            PolicyName=f"{endpoint}-concurrency",
            ServiceNamespace=NAMESPACE,
            ResourceId=deployed.resource_id,
            ScalableDimension=DIMENSION,
            PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration={
                "TargetValue": target_value,
                "PredefinedMetricSpecification": {"PredefinedMetricType": tt_metric},
                "ScaleOutCooldown": scale_out_cooldown,
                "DisableScaleIn": disable_scale_in,
            },
        )["PolicyARN"]
    if step:
        deployed.step_policy_arn = aas.put_scaling_policy(
            PolicyName=f"{endpoint}-scale-in",
            ServiceNamespace=NAMESPACE,
            ResourceId=deployed.resource_id,
            ScalableDimension=DIMENSION,
            PolicyType="StepScaling",
            StepScalingPolicyConfiguration={
                "AdjustmentType": "ChangeInCapacity",
                "StepAdjustments": [
                    {"MetricIntervalUpperBound": 0, "ScalingAdjustment": scale_in_adjustment}
                ],
                "Cooldown": scale_in_cooldown,
            },
        )["PolicyARN"]
        if step_alarm:
            name = f"{endpoint}-ScaleIn"
            cw.put_metric_alarm(
                AlarmName=name,
                Namespace="AWS/SageMaker",
                MetricName=scale_in_metric,
                Dimensions=dims,
                Statistic=scale_in_statistic,
                Period=scale_in_period,
                EvaluationPeriods=scale_in_periods,
                Threshold=scale_in_threshold,
                ComparisonOperator=scale_in_comparison,
                AlarmActions=[deployed.step_policy_arn],
            )
            deployed.alarms.append(name)
    if first_chunk_alarm:
        name = f"SpeechEndpoint-{endpoint}-FirstChunkLatencyP95"
        cw.put_metric_alarm(
            AlarmName=name,
            Namespace="TTS/Container",
            MetricName="FirstChunkLatency",
            Dimensions=dims,
            ExtendedStatistic="p95",
            Period=60,
            EvaluationPeriods=3,
            Threshold=first_chunk_ms,
            ComparisonOperator="GreaterThanThreshold",
        )
        deployed.alarms.append(name)
    if metric_data:
        put_concurrency(
            endpoint, deployed.variant, [(datetime.now(UTC) - timedelta(minutes=5), 3.0)]
        )
    return deployed


def put_concurrency(endpoint: str, variant: str, points: list[tuple[datetime, float]]) -> None:
    client("cloudwatch").put_metric_data(
        Namespace="AWS/SageMaker",
        MetricData=[
            {
                "MetricName": "ConcurrentRequestsPerModel",
                "Dimensions": [
                    {"Name": "EndpointName", "Value": endpoint},
                    {"Name": "VariantName", "Value": variant},
                ],
                "Timestamp": at,
                "Value": value,
                "StorageResolution": 1,
            }
            for at, value in points
        ],
    )


def teardown(endpoint: str) -> None:
    """Remove what :func:`deploy` made for this name (for tests that must use a fixed name)."""
    sm = client("sagemaker")
    aas = client("application-autoscaling")
    cw = client("cloudwatch")
    prefix = f"endpoint/{endpoint}/variant/"
    for policy in aas.describe_scaling_policies(ServiceNamespace=NAMESPACE)["ScalingPolicies"]:
        if policy["ResourceId"].startswith(prefix):
            aas.delete_scaling_policy(
                PolicyName=policy["PolicyName"],
                ServiceNamespace=NAMESPACE,
                ResourceId=policy["ResourceId"],
                ScalableDimension=policy["ScalableDimension"],
            )
    for target in aas.describe_scalable_targets(ServiceNamespace=NAMESPACE)["ScalableTargets"]:
        if target["ResourceId"].startswith(prefix):
            aas.deregister_scalable_target(
                ServiceNamespace=NAMESPACE,
                ResourceId=target["ResourceId"],
                ScalableDimension=target["ScalableDimension"],
            )
    names = [
        a["AlarmName"] for a in cw.describe_alarms()["MetricAlarms"] if endpoint in a["AlarmName"]
    ]
    if names:
        cw.delete_alarms(AlarmNames=names)
    for call, kwargs in (
        (sm.delete_endpoint, {"EndpointName": endpoint}),
        (sm.delete_endpoint_config, {"EndpointConfigName": f"{endpoint}-config"}),
        (sm.delete_model, {"ModelName": f"{endpoint}-model"}),
    ):
        with contextlib.suppress(sm.exceptions.ClientError):
            call(**kwargs)


def target_state(resource_id: str) -> dict[str, Any] | None:
    targets = client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace=NAMESPACE, ResourceIds=[resource_id], ScalableDimension=DIMENSION
    )["ScalableTargets"]
    return targets[0] if targets else None


# A scalable target's three suspension flags: freeze sets them all, thaw puts them back. Written
# out, not aws.scaling.SUSPEND_FLAGS, so that a flag the code forgets still shows here.
SUSPENSION_FLAGS = (
    "DynamicScalingInSuspended",
    "DynamicScalingOutSuspended",
    "ScheduledScalingSuspended",
)
ALL_TRUE = dict.fromkeys(SUSPENSION_FLAGS, True)
ALL_FALSE = dict.fromkeys(SUSPENSION_FLAGS, False)


def suspended(resource_id: str) -> dict[str, bool]:
    target = target_state(resource_id)
    assert target is not None, f"{resource_id}: no scalable target"
    state = target.get("SuspendedState") or {}
    return {flag: bool(state.get(flag, False)) for flag in SUSPENSION_FLAGS}


def desired_count(endpoint: str) -> int:
    variants = client("sagemaker").describe_endpoint(EndpointName=endpoint)["ProductionVariants"]
    return int(variants[0]["DesiredInstanceCount"])


def suspend(resource_id: str, **flags: bool) -> None:
    client("application-autoscaling").register_scalable_target(
        ServiceNamespace=NAMESPACE,
        ResourceId=resource_id,
        ScalableDimension=DIMENSION,
        SuspendedState={
            "DynamicScalingInSuspended": flags.get("DynamicScalingInSuspended", False),
            "DynamicScalingOutSuspended": flags.get("DynamicScalingOutSuspended", False),
            "ScheduledScalingSuspended": flags.get("ScheduledScalingSuspended", False),
        },
    )


def suspend_with_limits(resource_id: str, low: int, high: int) -> None:
    """Change a target's MinCapacity/MaxCapacity, keeping its SuspendedState."""
    target = target_state(resource_id)
    assert target is not None
    client("application-autoscaling").register_scalable_target(
        ServiceNamespace=NAMESPACE,
        ResourceId=resource_id,
        ScalableDimension=DIMENSION,
        MinCapacity=low,
        MaxCapacity=high,
        SuspendedState=target.get("SuspendedState") or {},
    )


def lock_keys(endpoint: str) -> list[str]:
    """The tts-bench tags on the endpoint (the freeze locks), sorted."""
    sm = client("sagemaker")
    arn = sm.describe_endpoint(EndpointName=endpoint)["EndpointArn"]
    tags = sm.list_tags(ResourceArn=arn)["Tags"]
    return sorted(t["Key"] for t in tags if t["Key"].startswith("tts-bench:"))


def record_operations(*clients: Any) -> list[str]:
    """Names of every AWS operation the clients make from now on."""
    seen: list[str] = []

    def before_call(model: Any, **kwargs: Any) -> None:
        seen.append(model.name)

    for client in clients:
        client.meta.events.register("before-call", before_call)
    return seen


def make_plan(**overrides: Any) -> PlanArtifact:
    """The worked example's plan for a 4-instance g4dn fleet on moto, with an ok verdict."""
    values: dict[str, Any] = {
        "slug": "g4dnxlarge-8b1b96bc",
        "inputs": {},
        "max_instances": 4,
        "per_instance_rps_at_c_scale_max": 20.0,
        "findings": [],
        "verdict": "ok",
        "config_block": "ModelEndpointConfig(...)",
    }
    return factories.make_plan(**{**values, **overrides})


def run_control_plane(clients: Any, artifacts_dir: Any) -> Deployed:
    """What a run does to a deployed endpoint on moto: freeze (lock, suspend, pin) and its
    restore with a lock let go on the way, thaw, drift, validate and the rungs' CloudWatch join."""
    from pytest_tts_scaling.aws.checks.drift import run_drift
    from pytest_tts_scaling.aws.checks.validate import run_validate
    from pytest_tts_scaling.aws.cloudwatch import annotate_rungs
    from pytest_tts_scaling.aws.fingerprint import describe_endpoint
    from pytest_tts_scaling.aws.lifecycle.freeze import freeze, thaw
    from pytest_tts_scaling.aws.lifecycle.lock import abandon_lock, read_locks

    d = deploy(unique(), instances=2)
    arn = (describe_endpoint(clients.sagemaker, d.endpoint) or {})["EndpointArn"]
    with freeze(clients, d.endpoint, artifacts_dir=artifacts_dir, log=lambda line: None):
        (lock,) = read_locks(clients.sagemaker, arn)
        abandon_lock(clients.sagemaker, arn, lock)
    thaw(clients, d.endpoint, artifacts_dir=artifacts_dir, log=lambda line: None)
    run_drift(clients, d.endpoint, artifacts_dir=artifacts_dir, plan=make_plan())
    run_validate(clients, d.endpoint, make_plan())
    now = datetime.now(UTC)
    rung = factories.make_rung(1).model_copy(
        update={
            "window_start": (now - timedelta(minutes=30)).isoformat(),
            "window_end": (now - timedelta(minutes=29)).isoformat(),
        }
    )
    annotate_rungs(
        clients.cloudwatch, [rung], endpoint=d.endpoint, variant="AllTraffic", clock=clients.clock
    )
    return d
