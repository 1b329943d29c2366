"""drift against moto: one deployment per finding, and proof that it never writes."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

from pathlib import Path

import boto3
from botocore.stub import Stubber

from pytest_tts_scaling.aws.checks.drift import DriftReport, run_drift
from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.lifecycle.snapshot import snapshot_path
from tests.aws.aws_helpers import deploy, make_plan, record_operations, suspend, unique


def drift(clients: AwsClients, endpoint: str, tmp_path: Path, **kwargs: object) -> DriftReport:
    return run_drift(clients, endpoint, artifacts_dir=tmp_path, **kwargs)  # type: ignore[arg-type]


def checks(report: DriftReport) -> set[tuple[str, str]]:
    return {(f.check, f.severity) for f in report.findings}


def test_healthy_endpoint_is_preflight_ok_and_nothing_is_written(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique())
    ops = record_operations(clients.sagemaker, clients.autoscaling, clients.cloudwatch)
    report = drift(clients, d.endpoint, tmp_path, plan=make_plan())
    assert report.findings == ()
    assert report.lines() == ["preflight-ok"]
    assert ops, "drift made no AWS calls"
    assert all(op.startswith(("Describe", "Get", "List")) for op in ops), ops


def test_scale_out_suspended_is_an_error(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    suspend(d.resource_id, DynamicScalingOutSuspended=True)
    report = drift(clients, d.endpoint, tmp_path)
    assert checks(report) == {("suspended_scaling", "error")}
    assert "DynamicScalingOutSuspended" in report.errors[0].detail
    assert report.lines()[-1].startswith("preflight-failed")


def test_scale_in_suspended_is_a_warning(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    suspend(d.resource_id, DynamicScalingInSuspended=True, ScheduledScalingSuspended=True)
    report = drift(clients, d.endpoint, tmp_path)
    assert checks(report) == {("suspended_scaling", "warn")}
    assert report.ok
    assert report.lines()[-1] == "preflight-ok"


def test_missing_endpoint_orphans_its_targets_and_policies(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique())
    clients.sagemaker.delete_endpoint(EndpointName=d.endpoint)
    report = drift(clients, d.endpoint, tmp_path)
    assert ("endpoint_status", "error") in checks(report)
    assert ("orphaned_target", "error") in checks(report)
    assert "not found" in report.for_check("endpoint_status")[0].detail


def test_target_for_a_variant_that_does_not_exist_is_orphaned(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique())
    clients.autoscaling.register_scalable_target(
        ServiceNamespace="sagemaker",
        ResourceId=f"endpoint/{d.endpoint}/variant/Canary",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
        MinCapacity=1,
        MaxCapacity=2,
    )
    report = drift(clients, d.endpoint, tmp_path)
    assert checks(report) == {("orphaned_target", "error")}
    assert "variant/Canary" in report.errors[0].detail


def test_policy_without_a_target_is_orphaned(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    clients.autoscaling.deregister_scalable_target(  # moto keeps the policies
        ServiceNamespace="sagemaker",
        ResourceId=d.resource_id,
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
    )
    report = drift(clients, d.endpoint, tmp_path)
    assert checks(report) == {("orphaned_policy", "error"), ("missing_target", "warn")}
    assert len(report.for_check("orphaned_policy")) == 2


def test_missing_target_is_a_warning(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique(), target=False, tracking=False, step=False)
    report = drift(clients, d.endpoint, tmp_path, plan=make_plan(min_instances=2))
    assert checks(report) == {("missing_target", "warn")}
    assert "plan asks for 2..4" in report.warnings[0].detail


def test_capacity_outside_the_target_and_unlike_the_plan(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique(), instances=5, min_capacity=1, max_capacity=4)
    report = drift(clients, d.endpoint, tmp_path, plan=make_plan(min_instances=3, max_instances=4))
    details = [f.detail for f in report.for_check("capacity_mismatch")]
    assert checks(report) == {("capacity_mismatch", "warn")}
    assert any("desired instance count 5 is outside the target's 1..4" in x for x in details)
    assert any("target capacity 1..4, the plan for kokoro-82m says 3..4" in x for x in details)


def test_policy_whose_metric_has_no_datapoints_is_inert(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique(), metric_data=False)
    report = drift(clients, d.endpoint, tmp_path)
    assert checks(report) == {("inert_policy", "warn")}
    sources = " ".join(f.detail for f in report.warnings)
    assert f"policy {d.endpoint}-concurrency" in sources
    assert f"alarm {d.endpoint}-ScaleIn" in sources
    assert "ConcurrentRequestsPerModel" in sources


def test_step_policy_that_no_alarm_invokes_is_inert(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique(), step_alarm=False)
    report = drift(clients, d.endpoint, tmp_path)
    assert checks(report) == {("inert_policy", "warn")}
    assert "no alarm invokes" in report.warnings[0].detail


def test_alarm_in_insufficient_data_is_a_warning(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    for name in d.alarms:
        clients.cloudwatch.set_alarm_state(
            AlarmName=name, StateValue="INSUFFICIENT_DATA", StateReason="no data yet"
        )
    report = drift(clients, d.endpoint, tmp_path)
    assert checks(report) == {("alarm_insufficient_data", "warn")}
    assert {f.detail.split()[1] for f in report.warnings} == set(d.alarms)


def test_freeze_snapshot_left_behind_is_an_error(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    snapshot_path(tmp_path, d.endpoint).write_text("{not json")
    report = drift(clients, d.endpoint, tmp_path)
    assert checks(report) == {("freeze_snapshot", "error")}
    assert f"tts-bench thaw --endpoint {d.endpoint}" in report.errors[0].detail


def test_endpoint_not_in_service_is_an_error(clients: AwsClients, tmp_path: Path) -> None:
    d = deploy(unique())
    # moto creates endpoints InService at once; a stubbed SageMaker client says Updating.
    sagemaker = boto3.client("sagemaker")
    stubber = Stubber(sagemaker)
    stubber.add_response(
        "describe_endpoint",
        {
            "EndpointName": d.endpoint,
            "EndpointArn": f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{d.endpoint}",
            "EndpointConfigName": f"{d.endpoint}-config",
            "EndpointStatus": "Updating",
            "ProductionVariants": [
                {"VariantName": "AllTraffic", "CurrentInstanceCount": 2, "DesiredInstanceCount": 2}
            ],
            "CreationTime": "2026-01-01T00:00:00Z",
            "LastModifiedTime": "2026-01-01T00:00:00Z",
        },
        {"EndpointName": d.endpoint},
    )
    stubber.add_response(
        "list_tags",
        {"Tags": []},
        {"ResourceArn": f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{d.endpoint}"},
    )
    clients._clients["sagemaker"] = sagemaker
    with stubber:
        report = drift(clients, d.endpoint, tmp_path)
    stubber.assert_no_pending_responses()
    assert checks(report) == {("endpoint_status", "error")}
    assert "is Updating, expected InService" in report.errors[0].detail


@pytest.mark.parametrize("lookback_h", [1, 24])
def test_lookback_window_decides_inert(
    clients: AwsClients, tmp_path: Path, lookback_h: int
) -> None:
    from datetime import UTC, datetime, timedelta

    from tests.aws.aws_helpers import put_concurrency

    d = deploy(unique(), metric_data=False)
    put_concurrency(d.endpoint, d.variant, [(datetime.now(UTC) - timedelta(hours=3), 4.0)])
    report = drift(clients, d.endpoint, tmp_path, lookback_s=lookback_h * 3600.0)
    assert bool(report.for_check("inert_policy")) is (lookback_h == 1)
