"""`--inference-component NAME`: requests, fingerprint, freeze, thaw, drift, validate and the
CloudWatch join on one inference component of an endpoint.

moto 5.2.5 has no inference components (no DescribeInferenceComponent, no
UpdateInferenceComponentRuntimeConfig) and its Application Auto Scaling refuses the dimension
`sagemaker:inference-component:DesiredCopyCount`, so the SageMaker and Application Auto Scaling
calls here go through botocore's Stubber, which checks every request and response against the
service model and fails on any call not expected, in order. CloudWatch (alarms, metric data)
is moto's.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from botocore.stub import ANY, Stubber

from pytest_tts_scaling.artifacts import save
from pytest_tts_scaling.aws.checks.drift import run_drift
from pytest_tts_scaling.aws.checks.validate import VALIDATE_FIELDS, run_validate
from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.cloudwatch import annotate_rungs
from pytest_tts_scaling.aws.fingerprint import read_deployment
from pytest_tts_scaling.aws.lifecycle.freeze import freeze, thaw
from pytest_tts_scaling.aws.lifecycle.snapshot import (
    FreezeSnapshot,
    TargetSnapshot,
    read_snapshot,
    snapshot_path,
)
from pytest_tts_scaling.cli import main
from pytest_tts_scaling.core.records import RequestSpec, StreamTimer
from pytest_tts_scaling.endpoints.sagemaker import SageMakerEndpoint
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.options import RunOptions
from tests.aws.aws_helpers import (
    ALL_FALSE,
    ALL_TRUE,
    FakeClock,
    client,
    make_plan,
    record_operations,
    unique,
)
from tests.aws.eventstream_server import (
    EventStreamServer,
    Script,
    payload_part,
)
from tests.factories import make_rung

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EP = "speech-ic"
NS = "sagemaker"
IC_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
IC_METRIC = "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
ACCOUNT = "arn:aws:sagemaker:us-east-1:123456789012"
DEAD_PID = 99_999_999  # above Linux's pid_max: no such process
DIGEST = "sha256:77aa55cc" + "1" * 56
REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/speech-kokoro"
IMAGE = f"{REPOSITORY}:v7"


def resource(component: str) -> str:
    return f"inference-component/{component}"


def endpoint_description(status: str = "InService") -> dict[str, Any]:
    return {
        "EndpointName": EP,
        "EndpointArn": f"{ACCOUNT}:endpoint/{EP}",
        "EndpointConfigName": f"{EP}-config",
        "ProductionVariants": [
            {"VariantName": "AllTraffic", "CurrentInstanceCount": 2, "DesiredInstanceCount": 2}
        ],
        "EndpointStatus": status,
        "CreationTime": T0,
        "LastModifiedTime": T0,
    }


def endpoint_config() -> dict[str, Any]:
    # An endpoint of inference components: the variant has an instance type and no model.
    return {
        "EndpointConfigName": f"{EP}-config",
        "EndpointConfigArn": f"{ACCOUNT}:endpoint-config/{EP}-config",
        "ProductionVariants": [
            {"VariantName": "AllTraffic", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 2}
        ],
        "CreationTime": T0,
    }


def component(
    name: str,
    *,
    status: str = "InService",
    current: int = 3,
    desired: int = 3,
    endpoint: str = EP,
) -> dict[str, Any]:
    return {
        "InferenceComponentName": name,
        "InferenceComponentArn": f"{ACCOUNT}:inference-component/{name}",
        "EndpointName": endpoint,
        "EndpointArn": f"{ACCOUNT}:endpoint/{endpoint}",
        "VariantName": "AllTraffic",
        "Specification": {
            "ModelName": "kokoro-model",
            "Container": {
                "DeployedImage": {
                    "SpecifiedImage": IMAGE,
                    "ResolvedImage": f"{REPOSITORY}@{DIGEST}",
                },
                "Environment": {"QUEUE_MAX_DEPTH": "50"},
            },
            "ComputeResourceRequirements": {
                "NumberOfAcceleratorDevicesRequired": 1,
                "MinMemoryRequiredInMb": 2048,
            },
        },
        "RuntimeConfig": {"DesiredCopyCount": desired, "CurrentCopyCount": current},
        "CreationTime": T0,
        "LastModifiedTime": T0,
        "InferenceComponentStatus": status,
    }


def model() -> dict[str, Any]:
    return {
        "ModelName": "kokoro-model",
        "ModelArn": f"{ACCOUNT}:model/kokoro-model",
        "CreationTime": T0,
        "PrimaryContainer": {
            "Image": IMAGE,
            "Environment": {"QUEUE_MAX_DEPTH": "10", "VOICE": "af_heart"},
        },
    }


def target(
    name: str, *, flags: dict[str, bool] | None = None, low: int = 1, high: int = 4
) -> dict[str, Any]:
    return {
        "ServiceNamespace": NS,
        "ResourceId": resource(name),
        "ScalableDimension": IC_DIMENSION,
        "MinCapacity": low,
        "MaxCapacity": high,
        "RoleARN": "arn:aws:iam::123456789012:role/autoscaling",
        "CreationTime": T0,
        "SuspendedState": flags or ALL_FALSE,
    }


def policies(name: str) -> list[dict[str, Any]]:
    common = {
        "ServiceNamespace": NS,
        "ResourceId": resource(name),
        "ScalableDimension": IC_DIMENSION,
        "CreationTime": T0,
    }
    return [
        {
            **common,
            "PolicyName": f"{name}-invocations",
            "PolicyARN": f"arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:{name}-inv",
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 99.0,
                "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"
                },
                "ScaleOutCooldown": 99,
            },
        },
        {
            **common,
            "PolicyName": f"{name}-concurrency",
            "PolicyARN": f"arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:{name}-tt",
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 37.5,
                "PredefinedMetricSpecification": {"PredefinedMetricType": IC_METRIC},
                "ScaleOutCooldown": 30,
                "DisableScaleIn": True,
            },
        },
        {
            **common,
            "PolicyName": f"{name}-scale-in",
            "PolicyARN": scale_in_arn(name),
            "PolicyType": "StepScaling",
            "StepScalingPolicyConfiguration": {
                "AdjustmentType": "ChangeInCapacity",
                "StepAdjustments": [{"MetricIntervalUpperBound": 0.0, "ScalingAdjustment": -1}],
                "Cooldown": 960,
            },
        },
    ]


def scale_in_arn(name: str) -> str:
    return f"arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:{name}-in"


def put_alarms(name: str, *, state_data: bool = True) -> None:
    cw = client("cloudwatch")
    dims = [{"Name": "InferenceComponentName", "Value": name}]
    cw.put_metric_alarm(
        AlarmName=f"{name}-ScaleIn",
        Namespace="AWS/SageMaker",
        MetricName="ConcurrentRequestsPerCopy",
        Dimensions=dims,
        Statistic="Maximum",
        Period=10,
        EvaluationPeriods=3,
        Threshold=25.0,
        ComparisonOperator="LessThanOrEqualToThreshold",
        AlarmActions=[scale_in_arn(name)],
    )
    cw.put_metric_alarm(
        AlarmName=f"SpeechEndpoint-{name}-FirstChunkLatencyP95",
        Namespace="TTS/Container",
        MetricName="FirstChunkLatency",
        Dimensions=dims,
        ExtendedStatistic="p95",
        Period=60,
        EvaluationPeriods=3,
        Threshold=65.0,
        ComparisonOperator="GreaterThanThreshold",
    )
    if state_data:
        for alarm in (f"{name}-ScaleIn", f"SpeechEndpoint-{name}-FirstChunkLatencyP95"):
            cw.set_alarm_state(AlarmName=alarm, StateValue="OK", StateReason="data")


def put_per_copy(
    name: str, value: float, at: datetime, metric: str = "ConcurrentRequestsPerCopy"
) -> None:
    client("cloudwatch").put_metric_data(
        Namespace="AWS/SageMaker",
        MetricData=[
            {
                "MetricName": metric,
                "Dimensions": [{"Name": "InferenceComponentName", "Value": name}],
                "Timestamp": at,
                "Value": value,
                "StorageResolution": 1,
            }
        ],
    )


@dataclass
class Stubs:
    clients: AwsClients
    sagemaker: Stubber
    autoscaling: Stubber
    clock: FakeClock


def stubbed(service: str) -> Any:
    return boto3.client(
        service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


@pytest.fixture
def stubs(aws_env: dict[str, str]) -> Iterator[Stubs]:
    """SageMaker and Application Auto Scaling stubbed; CloudWatch on moto; a fake clock."""
    clock = FakeClock(start=T0)
    sagemaker, autoscaling = stubbed("sagemaker"), stubbed("application-autoscaling")
    clients = AwsClients(
        clock=clock.clock(),
        _clients={
            "sagemaker": sagemaker,
            "application-autoscaling": autoscaling,
            "cloudwatch": client("cloudwatch"),
        },
    )
    with Stubber(sagemaker) as sm, Stubber(autoscaling) as aas:
        yield Stubs(clients, sm, aas, clock)
        sm.assert_no_pending_responses()
        aas.assert_no_pending_responses()


def expect_component(stubs: Stubs, name: str, **state: Any) -> None:
    stubs.sagemaker.add_response(
        "describe_inference_component",
        component(name, **state),
        {"InferenceComponentName": name},
    )


def expect_target(stubs: Stubs, name: str, found: list[dict[str, Any]]) -> None:
    stubs.autoscaling.add_response(
        "describe_scalable_targets",
        {"ScalableTargets": found},
        {
            "ServiceNamespace": NS,
            "ResourceIds": [resource(name)],
            "ScalableDimension": IC_DIMENSION,
        },
    )


def expect_register(stubs: Stubs, name: str, flags: dict[str, bool]) -> None:
    stubs.autoscaling.add_response(
        "register_scalable_target",
        {},
        {
            "ServiceNamespace": NS,
            "ResourceId": resource(name),
            "ScalableDimension": IC_DIMENSION,
            "SuspendedState": flags,
        },
    )


def expect_copies(stubs: Stubs, name: str, count: int) -> None:
    stubs.sagemaker.add_response(
        "update_inference_component_runtime_config",
        {"InferenceComponentArn": f"{ACCOUNT}:inference-component/{name}"},
        {"InferenceComponentName": name, "DesiredRuntimeConfig": {"CopyCount": count}},
    )


def expect_tags(stubs: Stubs, *calls: str) -> None:
    """The freeze lock's tag calls on the endpoint, in order (no other run holds it)."""
    arn = {"ResourceArn": f"{ACCOUNT}:endpoint/{EP}"}
    for call in calls:
        if call == "list_tags":
            stubs.sagemaker.add_response("list_tags", {"Tags": []}, arn)
        else:
            key = "Tags" if call == "add_tags" else "TagKeys"
            stubs.sagemaker.add_response(call, {}, {**arn, key: ANY})


def expect_deployment(stubs: Stubs, name: str) -> None:
    stubs.sagemaker.add_response("describe_endpoint", endpoint_description(), {"EndpointName": EP})
    stubs.sagemaker.add_response(
        "describe_endpoint_config", endpoint_config(), {"EndpointConfigName": f"{EP}-config"}
    )
    expect_component(stubs, name)
    stubs.sagemaker.add_response("describe_model", model(), {"ModelName": "kokoro-model"})


# --- requests ------------------------------------------------------------------------------------


def test_requests_name_the_component(runtime: EventStreamServer) -> None:
    import asyncio

    from pytest_tts_scaling.load.transports.sagemaker_stream import SageMakerStreamTransport

    runtime.scripts[EP] = Script(messages=[(0.0, payload_part(b"\x01\x00" * 100))])

    async def send(component: str | None) -> str:
        transport = SageMakerStreamTransport(EP, concurrency=1, variant="AllTraffic")
        async with transport, transport.session() as session:
            spec = RequestSpec(request_id="r1", body={"text": "Hi."}, component=component)
            timer = StreamTimer(spec.audio)
            await session.send(spec, timer)
            return timer.status

    assert asyncio.run(send("kokoro-ic")) == "ok"
    assert asyncio.run(send(None)) == "ok"
    named, plain = runtime.received
    assert named.headers["X-Amzn-SageMaker-Inference-Component"] == "kokoro-ic"
    assert named.headers["X-Amzn-SageMaker-Target-Variant"] == "AllTraffic"
    assert "X-Amzn-SageMaker-Inference-Component" not in plain.headers


def test_workload_carries_the_component_from_the_options() -> None:
    from pytest_tts_scaling.steps.inputs import WorkloadInputs

    options = RunOptions(endpoint=EP, inference_component="kokoro-ic")
    spec = WorkloadInputs.from_options(options).workload("sagemaker").request(4, 0, 0)
    assert spec.component == "kokoro-ic"


# --- fingerprint and the endpoint handle ----------------------------------------------------------


def test_fingerprint_is_the_components_model_and_image(stubs: Stubs) -> None:
    expect_deployment(stubs, "kokoro-ic")
    deployment = read_deployment(stubs.clients.sagemaker, EP, "kokoro-ic")
    assert deployment.component == "kokoro-ic"
    assert deployment.variant == "AllTraffic"
    assert deployment.instance_type == "ml.g5.xlarge"
    assert deployment.model_name == "kokoro-model"
    assert deployment.image_digest == DIGEST
    assert deployment.slug == "g5xlarge-77aa55cc"
    # The component's own environment overrides its model's.
    assert deployment.container_env == {"QUEUE_MAX_DEPTH": "50", "VOICE": "af_heart"}


def test_an_endpoint_of_components_asks_for_one(stubs: Stubs) -> None:
    stubs.sagemaker.add_response("describe_endpoint", endpoint_description())
    stubs.sagemaker.add_response("describe_endpoint_config", endpoint_config())
    with pytest.raises(
        InputError,
        match=r"expected --tts-inference-component \(tts-bench: --inference-component\) NAME",
    ):
        read_deployment(stubs.clients.sagemaker, EP)


def test_a_missing_or_foreign_component_is_refused(stubs: Stubs) -> None:
    stubs.sagemaker.add_response("describe_endpoint", endpoint_description())
    stubs.sagemaker.add_response("describe_endpoint_config", endpoint_config())
    stubs.sagemaker.add_client_error(
        "describe_inference_component",
        service_error_code="ValidationException",
        service_message="Could not find inference component",
    )
    with pytest.raises(InputError, match="inference component 'gone' not found"):
        read_deployment(stubs.clients.sagemaker, EP, "gone")
    stubs.sagemaker.add_response("describe_endpoint", endpoint_description())
    stubs.sagemaker.add_response("describe_endpoint_config", endpoint_config())
    expect_component(stubs, "elsewhere", endpoint="speech-other")
    with pytest.raises(
        InputError, match=r"runs on endpoint 'speech-other'.*--endpoint speech-other"
    ):
        read_deployment(stubs.clients.sagemaker, EP, "elsewhere")


def component_endpoint(stubs: Stubs, tmp_path: Path, name: str = "kokoro-ic") -> SageMakerEndpoint:
    expect_deployment(stubs, name)
    deployment = read_deployment(stubs.clients.sagemaker, EP, name)
    return SageMakerEndpoint(deployment, clients=stubs.clients, artifacts_dir=tmp_path, log=print)


def test_capacity_is_the_copy_count_and_bidi_is_refused(stubs: Stubs, tmp_path: Path) -> None:
    endpoint = component_endpoint(stubs, tmp_path)
    expect_component(stubs, "kokoro-ic", current=2, desired=3)
    assert endpoint.instance_count() == 2
    assert endpoint.scope.resource_id == "inference-component/kokoro-ic"
    assert endpoint.scope.dimension == IC_DIMENSION
    with pytest.raises(InputError, match=r"no InferenceComponentName.*expected response-stream"):
        endpoint.transport("bidi", concurrency=2)
    assert endpoint.transport("response-stream", concurrency=2).name == "response-stream"


# --- freeze and thaw ------------------------------------------------------------------------------


def test_freeze_pins_one_copy_and_restores_the_copies(stubs: Stubs, tmp_path: Path) -> None:
    name = "kokoro-ic"
    stubs.sagemaker.add_response("describe_endpoint", endpoint_description(), {"EndpointName": EP})
    expect_tags(stubs, "list_tags")  # nobody holds the endpoint
    expect_component(stubs, name)  # the snapshot: 3 copies
    stubs.autoscaling.add_response(
        "describe_scaling_policies",
        {"ScalingPolicies": policies(name)},
        {"ServiceNamespace": NS, "ResourceId": resource(name)},
    )
    expect_target(stubs, name, [target(name)])
    expect_tags(stubs, "add_tags", "list_tags")  # the lock, read back
    expect_register(stubs, name, ALL_TRUE)
    expect_component(stubs, name)  # InService
    expect_component(stubs, name)  # desired 3
    expect_copies(stubs, name, 1)
    expect_component(stubs, name, status="Updating", current=3, desired=1)
    expect_component(stubs, name, current=1, desired=1)
    expect_target(stubs, name, [target(name, flags=ALL_TRUE)])  # verified frozen
    expect_component(stubs, name, current=1, desired=1)
    lines: list[str] = []
    path = snapshot_path(tmp_path, EP, name)
    assert path.name == ".freeze-speech-ic.kokoro-ic.json"
    with freeze(stubs.clients, EP, artifacts_dir=tmp_path, log=lines.append, component=name):
        snapshot = read_snapshot(path)
        assert snapshot is not None
        assert snapshot.inference_component == name
        assert snapshot.desired_copy_count == 3
        assert snapshot.target is not None
        assert snapshot.target.resource_id == resource(name)
        assert [p["PolicyName"] for p in snapshot.policies] == [
            p["PolicyName"] for p in policies(name)
        ]
        assert not snapshot_path(tmp_path, EP).exists()
        stubs.sagemaker.assert_no_pending_responses()
        stubs.autoscaling.assert_no_pending_responses()
        # What the exit will do: flags back, then three copies.
        expect_target(stubs, name, [target(name, flags=ALL_TRUE)])
        expect_register(stubs, name, ALL_FALSE)
        expect_component(stubs, name, current=1, desired=1)
        expect_copies(stubs, name, 3)
        expect_tags(stubs, "delete_tags")  # the lock released
    assert not path.exists()
    assert stubs.clock.sleeps == [15.0]  # one wait while the copies went from 3 to 1
    assert "inference component kokoro-ic: frozen at one copy" in lines
    assert "inference component kokoro-ic: desired copy count 1 -> 3" in lines


def ic_snapshot(name: str) -> FreezeSnapshot:
    return FreezeSnapshot(
        endpoint=EP,
        variant="AllTraffic",
        created_at=T0.isoformat(),
        pid=DEAD_PID,
        target=TargetSnapshot(
            resource_id=resource(name), min_capacity=1, max_capacity=4, suspended_state=ALL_FALSE
        ),
        desired_instance_count=2,
        current_instance_count=2,
        inference_component=name,
        desired_copy_count=3,
        current_copy_count=3,
    )


def test_thaw_restores_the_component_from_its_snapshot(stubs: Stubs, tmp_path: Path) -> None:
    name = "kokoro-ic"
    path = save(ic_snapshot(name), snapshot_path(tmp_path, EP, name))
    stubs.sagemaker.add_response("describe_endpoint", endpoint_description(), {"EndpointName": EP})
    expect_tags(stubs, "list_tags")
    expect_target(stubs, name, [target(name, flags=ALL_TRUE)])
    expect_register(stubs, name, ALL_FALSE)
    expect_component(stubs, name, current=1, desired=1)
    expect_copies(stubs, name, 3)
    done = thaw(
        stubs.clients,
        EP,
        artifacts_dir=tmp_path,
        log=lambda line: None,
        component=name,
    )
    assert "inference component kokoro-ic: desired copy count 1 -> 3" in done
    assert not path.exists()


def test_thaw_command_without_a_snapshot_clears_the_components_flags(
    stubs: Stubs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = "kokoro-ic"
    for flags, write in ((ALL_TRUE, True), (ALL_FALSE, False)):
        stubs.sagemaker.add_response(
            "describe_endpoint", endpoint_description(), {"EndpointName": EP}
        )
        expect_tags(stubs, "list_tags")
        stubs.autoscaling.add_response(
            "describe_scalable_targets",
            {"ScalableTargets": [target(name, flags=flags)]},
            {"ServiceNamespace": NS, "ResourceIds": [resource(name)]},
        )
        if write:
            expect_register(stubs, name, ALL_FALSE)
    monkeypatch.setattr("pytest_tts_scaling.aws.clients.AwsClients", lambda: stubs.clients)
    argv = [
        "thaw",
        "--endpoint",
        EP,
        "--inference-component",
        name,
        "--artifacts-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    assert main(argv) == 0  # idempotent
    out = capsys.readouterr().out
    assert f"{resource(name)}: no snapshot, SuspendedState cleared (all false)" in out
    assert f"{resource(name)}: not suspended, left alone" in out


# --- drift ----------------------------------------------------------------------------------------


def expect_drift_reads(stubs: Stubs, name: str, found: list[dict[str, Any]], **state: Any) -> None:
    stubs.sagemaker.add_response("describe_endpoint", endpoint_description(), {"EndpointName": EP})
    if state.pop("missing", False):
        stubs.sagemaker.add_client_error(
            "describe_inference_component", service_error_code="ValidationException"
        )
    else:
        expect_component(stubs, name, **state)
    expect_tags(stubs, "list_tags")  # no run's freeze lock
    # Namespace-wide reads (the variant's scaling): the component's policy is listed there too.
    stubs.autoscaling.add_response(
        "describe_scalable_targets", {"ScalableTargets": found}, {"ServiceNamespace": NS}
    )
    stubs.autoscaling.add_response(
        "describe_scaling_policies", {"ScalingPolicies": policies(name)}, {"ServiceNamespace": NS}
    )
    stubs.autoscaling.add_response(
        "describe_scalable_targets",
        {"ScalableTargets": found},
        {"ServiceNamespace": NS, "ResourceIds": [resource(name)]},
    )
    stubs.autoscaling.add_response(
        "describe_scaling_policies",
        {"ScalingPolicies": policies(name)},
        {"ServiceNamespace": NS, "ResourceId": resource(name)},
    )


def test_drift_of_a_healthy_component_is_preflight_ok(stubs: Stubs, tmp_path: Path) -> None:
    name = unique("ic")
    put_alarms(name)
    put_per_copy(name, 4.0, datetime.now(UTC) - timedelta(minutes=5))
    put_per_copy(name, 9.0, datetime.now(UTC) - timedelta(minutes=5), "InvocationsPerCopy")
    expect_drift_reads(stubs, name, [target(name)])
    ops = record_operations(stubs.clients.cloudwatch)
    stubs.clients.clock = FakeClock().clock()  # the metric lookback is from now
    report = run_drift(stubs.clients, EP, artifacts_dir=tmp_path, plan=make_plan(), component=name)
    assert report.findings == ()
    assert report.lines() == ["preflight-ok"]
    assert "GetMetricStatistics" in ops


def test_drift_of_a_suspended_component_without_data(stubs: Stubs, tmp_path: Path) -> None:
    name = unique("ic")
    put_alarms(name)
    save(ic_snapshot(name), snapshot_path(tmp_path, EP, name))
    suspended = {**ALL_FALSE, "DynamicScalingOutSuspended": True}
    expect_drift_reads(
        stubs, name, [target(name, flags=suspended)], status="Updating", current=3, desired=5
    )
    report = run_drift(stubs.clients, EP, artifacts_dir=tmp_path, component=name)
    found = {(f.check, f.severity): f.detail for f in report.findings}
    assert set(found) == {
        ("endpoint_status", "error"),
        ("freeze_snapshot", "error"),
        ("suspended_scaling", "error"),
        ("capacity_mismatch", "warn"),
        ("inert_policy", "warn"),
    }
    assert found[("endpoint_status", "error")] == (
        f"inference component {name} is Updating, expected InService"
    )
    assert f"--inference-component {name}" in found[("freeze_snapshot", "error")]
    assert found[("suspended_scaling", "error")].startswith(f"{resource(name)}: DynamicScalingOut")
    assert (
        "desired copy count 5 is outside the target's 1..4"
        in (found[("capacity_mismatch", "warn")])
    )
    inert = [f.detail for f in report.findings if f.check == "inert_policy"]
    # Both tracking policies and the scale-in alarm read per-copy metrics that have no data.
    assert len(inert) == 3
    assert any(
        f"AWS/SageMaker ConcurrentRequestsPerCopy [InferenceComponentName={name}]" in d
        for d in inert
    )


def test_drift_of_a_deleted_component_orphans_its_target(stubs: Stubs, tmp_path: Path) -> None:
    name = unique("ic")
    put_alarms(name)
    expect_drift_reads(stubs, name, [target(name)], missing=True)
    report = run_drift(stubs.clients, EP, artifacts_dir=tmp_path, component=name)
    assert {(f.check, f.severity) for f in report.findings} == {
        ("endpoint_status", "error"),
        ("orphaned_target", "error"),
    }
    assert not report.ok


# --- validate -------------------------------------------------------------------------------------


def test_validate_reads_the_components_scaling(stubs: Stubs) -> None:
    name = unique("ic")
    put_alarms(name)
    expect_deployment(stubs, name)
    expect_target(stubs, name, [target(name)])
    stubs.autoscaling.add_response(
        "describe_scaling_policies",
        {"ScalingPolicies": policies(name)},
        {"ServiceNamespace": NS, "ResourceId": resource(name)},
    )
    checks = {c.field: c for c in run_validate(stubs.clients, EP, make_plan(), component=name)}
    assert list(checks) == list(VALIDATE_FIELDS)
    assert all(c.ok for c in checks.values()), [c.line() for c in checks.values()]
    # The policy on ConcurrentRequestsPerCopy, not the first tracking policy listed.
    assert checks["target_value"].deployed == 37.5
    assert checks["queue_max_depth"].deployed == 50  # the component's, over its model's 10


# --- the CloudWatch join --------------------------------------------------------------------------


def test_join_reads_concurrent_requests_per_copy(aws_env: dict[str, str]) -> None:
    from tests.aws.aws_helpers import put_concurrency

    name = unique("ic")
    now = datetime.now(UTC).replace(microsecond=0)
    start, end = now - timedelta(seconds=70), now - timedelta(seconds=10)
    for offset in range(0, 60, 10):
        put_per_copy(name, 6.0, start + timedelta(seconds=offset))
    put_concurrency(EP, "AllTraffic", [(start + timedelta(seconds=20), 40.0)])  # not the copy's
    rung = make_rung(
        5,
        ttfab_p95_ms=50.0,
        completed=10,
        measure_s=60,
        window_start=start.isoformat(),
        window_end=end.isoformat(),
    )
    (out,) = annotate_rungs(
        client("cloudwatch"),
        [rung],
        endpoint=EP,
        variant="AllTraffic",
        component=name,
        clock=FakeClock(start=now).clock(),
        max_lag_s=0,
    )
    assert out.cw_max == 6.0
    assert out.cw_ratio == pytest.approx(6.0 / 5.0)


def test_commands_take_the_component() -> None:
    from pytest_tts_scaling.cli import build_parser

    parser = build_parser()
    for command in ("drift", "validate", "thaw"):
        args = parser.parse_args([command, "--endpoint", EP, "--inference-component", "kokoro-ic"])
        values = {k: v for k, v in vars(args).items() if k.startswith("tts_")}
        assert RunOptions.from_namespace(values).inference_component == "kokoro-ic", command
