"""validate against moto: each planned value held against what is deployed."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))


from pytest_tts_scaling.aws.checks.validate import VALIDATE_FIELDS, FieldCheck, run_validate
from pytest_tts_scaling.aws.clients import AwsClients
from tests.aws.aws_helpers import deploy, make_plan, record_operations, unique


def by_field(checks: list[FieldCheck]) -> dict[str, FieldCheck]:
    return {c.field: c for c in checks}


def test_deployment_matching_the_plan_passes_and_nothing_is_written(
    clients: AwsClients,
) -> None:
    d = deploy(unique())
    ops = record_operations(clients.sagemaker, clients.autoscaling, clients.cloudwatch)
    checks = run_validate(clients, d.endpoint, make_plan())
    assert [c.field for c in checks] == list(VALIDATE_FIELDS)
    assert all(c.ok for c in checks), [c.line() for c in checks]
    assert by_field(checks)["scale_in_threshold"].deployed == 25.0
    assert by_field(checks)["queue_max_depth"].deployed == 50
    assert all(op.startswith(("Describe", "Get", "List")) for op in ops), ops


# Deployed with these, checked against the default plan: exactly one field differs.
MISMATCHES = {
    "min_capacity": ({"min_capacity": 2}, "2", "1"),
    "max_capacity": ({"max_capacity": 6}, "6", "4"),
    "target_value": ({"target_value": 30.0}, "30", "37.5"),
    "scale_out_cooldown_s": ({"scale_out_cooldown": 60}, "60", "30"),
    "scale_in_threshold": ({"scale_in_threshold": 20.0}, "20", "25"),
    "scale_in_cooldown_s": ({"scale_in_cooldown": 300}, "300", "960"),
    "queue_max_depth": ({"env": {"QUEUE_MAX_DEPTH": "40"}}, "40", "50"),
    "first_chunk_alarm_ms": ({"first_chunk_ms": 80.0}, "80", "65"),
    "disable_scale_in": ({"disable_scale_in": False}, "false", "true"),
    "scale_in_step": (
        {"scale_in_adjustment": -2},
        "ChangeInCapacity -2 at or below the threshold",
        "ChangeInCapacity -1 at or below the threshold",
    ),
    "scale_in_metric": (
        {"scale_in_metric": "InvocationsPerInstance"},
        "AWS/SageMaker InvocationsPerInstance [",
        "AWS/SageMaker ConcurrentRequestsPerModel [",
    ),
    "scale_in_statistic": ({"scale_in_statistic": "Average"}, "Average", "Maximum"),
    "scale_in_period_s": ({"scale_in_period": 60}, "60", "10"),
    "scale_in_periods": ({"scale_in_periods": 15}, "15", "3"),
    "scale_in_comparison": (
        {"scale_in_comparison": "LessThanThreshold"},
        "LessThanThreshold",
        "LessThanOrEqualToThreshold",
    ),
}


@pytest.mark.parametrize("field", list(MISMATCHES))
def test_each_mismatch_names_field_deployed_and_planned(clients: AwsClients, field: str) -> None:
    deployed_with, deployed, planned = MISMATCHES[field]
    d = deploy(unique(), **deployed_with)  # type: ignore[arg-type]
    checks = run_validate(clients, d.endpoint, make_plan())
    failed = [c for c in checks if not c.ok]
    assert [c.field for c in failed] == [field]
    line = failed[0].line()
    assert line.startswith(f"MISMATCH {field}: deployed {deployed}"), line
    assert f", planned {planned}" in line, line


def test_a_tracking_policy_on_another_metric_is_not_compared_as_the_concurrency_one(
    clients: AwsClients,
) -> None:
    d = deploy(unique(), tt_metric="SageMakerVariantInvocationsPerInstance")
    checks = by_field(run_validate(clients, d.endpoint, make_plan()))
    failed = {name for name, c in checks.items() if not c.ok}
    # Its target value and cooldown happen to equal the plan's; they are not taken for the
    # concurrency policy's.
    assert failed == {"target_metric", "target_value", "disable_scale_in", "scale_out_cooldown_s"}
    assert checks["target_metric"].deployed == "SageMakerVariantInvocationsPerInstance"
    assert checks["target_value"].deployed is None


def test_missing_pieces_are_mismatches(clients: AwsClients) -> None:
    d = deploy(unique(), step=False, first_chunk_alarm=False, env={})
    checks = by_field(run_validate(clients, d.endpoint, make_plan()))
    missing = {name for name, c in checks.items() if c.deployed is None}
    assert missing == {
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
    }
    assert not any(checks[name].ok for name in missing)
    assert "deployed missing, planned 25" in checks["scale_in_threshold"].line()


def test_without_target_nothing_scaling_matches(clients: AwsClients) -> None:
    d = deploy(unique(), target=False, tracking=False, step=False)
    checks = by_field(run_validate(clients, d.endpoint, make_plan()))
    assert [n for n, c in checks.items() if c.ok] == ["queue_max_depth", "first_chunk_alarm_ms"]


def test_first_chunk_alarm_of_another_endpoint_is_not_taken(clients: AwsClients) -> None:
    other = deploy(unique(), first_chunk_ms=99.0)
    d = deploy(unique(), first_chunk_alarm=False)
    checks = by_field(run_validate(clients, d.endpoint, make_plan()))
    assert checks["first_chunk_alarm_ms"].deployed is None
    assert (
        by_field(run_validate(clients, other.endpoint, make_plan()))[
            "first_chunk_alarm_ms"
        ].deployed
        == 99.0
    )


def test_float_noise_is_not_a_mismatch() -> None:
    check = FieldCheck("target_value", 37.50000000001, 37.5, "x")
    assert check.ok
    assert not FieldCheck("target_value", 37.6, 37.5, "x").ok
    assert not FieldCheck("queue_max_depth", "deep", 50, "x").ok
    assert FieldCheck("disable_scale_in", True, True, "x").ok
    assert not FieldCheck("disable_scale_in", 1, True, "x").ok
    assert not FieldCheck("scale_in_statistic", None, "Maximum", "x").ok


def test_a_plan_that_weighed_instance_types_is_validated_as_its_chosen_one(
    clients: AwsClients,
) -> None:
    from tests.test_plan_candidates import cpu, gpu, weigh

    plan = weigh(gpu(), cpu(0.2)).artifact
    chosen, lost = sorted(plan.candidates or (), key=lambda c: not c.chosen)
    d = deploy(
        unique(),
        instance_type=chosen.instance_type,
        min_capacity=chosen.min_instances,
        max_capacity=chosen.max_instances,
    )
    checks = by_field(run_validate(clients, d.endpoint, plan))
    assert all(c.ok for c in checks.values()), [c.line() for c in checks.values()]
    assert checks["max_capacity"].planned == chosen.max_instances != lost.max_instances
