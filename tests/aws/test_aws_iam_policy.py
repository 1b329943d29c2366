"""The IAM policies under infra/iam/ are derived from the code, not kept by hand.

What the code needs is every AWS operation written in the source (tests/aws/aws_calls.py reads
it) mapped to IAM actions: the operation's own name, except for the few operations of
infra/iam/operation-actions.json, which say why (the response stream needs
sagemaker:InvokeEndpoint). measurement.json must grant exactly what pytest_tts_scaling calls,
runtime.json exactly what its data-plane calls (sagemaker-runtime) need; a freeze, thaw, drift,
validate and CloudWatch join on moto stay inside them. Every ARN names the partition as
`${AWS::Partition}`, never `aws`.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import json
from pathlib import Path
from typing import Any

from botocore.client import BaseClient

from pytest_tts_scaling.aws.clients import AwsClients
from tests.aws.aws_calls import ROOT, SERVICES, CallSite, call_sites
from tests.aws.aws_helpers import record_operations, run_control_plane

IAM = ROOT / "infra" / "iam"
PACKAGE = ROOT / "pytest_tts_scaling"
RUNTIME_SERVICES = {"sagemaker-runtime", "sagemaker-runtime-http2"}


def policy(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((IAM / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def differing() -> dict[str, list[str]]:
    table = json.loads((IAM / "operation-actions.json").read_text(encoding="utf-8"))
    return {key: row["actions"] for key, row in table["operations"].items()}


def actions_of(sites: list[CallSite]) -> set[str]:
    """The IAM actions the call sites need."""
    table = differing()
    prefix = {**SERVICES, "sagemaker-runtime-http2": "sagemaker"}
    needed: set[str] = set()
    for site in sites:
        key = f"{site.service}:{site.operation}"
        needed |= set(table.get(key, [f"{prefix[site.service]}:{site.operation}"]))
    return needed


def granted(name: str) -> set[str]:
    actions: set[str] = set()
    for statement in policy(name)["Statement"]:
        assert statement["Effect"] == "Allow"
        assert statement["Sid"]
        action = statement["Action"]
        actions |= {action} if isinstance(action, str) else set(action)
    return actions


def package_sites() -> list[CallSite]:
    return [s for s in call_sites() if (ROOT / s.path).is_relative_to(PACKAGE)]


def test_the_measurement_policy_grants_exactly_what_the_package_calls() -> None:
    code, policy_actions = actions_of(package_sites()), granted("measurement")
    assert code - policy_actions == set(), (
        f"called but not granted: {sorted(code - policy_actions)}"
    )
    assert policy_actions - code == set(), f"granted, never called: {sorted(policy_actions - code)}"
    assert not any("*" in action for action in policy_actions)


def test_the_runtime_policy_grants_exactly_what_invoking_needs() -> None:
    sites = [s for s in package_sites() if s.service in RUNTIME_SERVICES]
    assert {s.operation for s in sites} == {
        "InvokeEndpointWithResponseStream",
        "InvokeEndpointWithBidirectionalStream",
    }
    assert granted("runtime") == actions_of(sites)


def test_a_response_stream_is_granted_invoke_endpoint_as_well() -> None:
    """The finding that started this: the stream alone would be denied."""
    for name in ("measurement", "runtime"):
        assert "sagemaker:InvokeEndpoint" in granted(name), name


def test_every_table_row_is_an_operation_the_code_calls_and_says_why() -> None:
    called = {f"{s.service}:{s.operation}" for s in call_sites()}
    table = json.loads((IAM / "operation-actions.json").read_text(encoding="utf-8"))
    for key, row in table["operations"].items():
        assert key in called, key
        assert len(row["why"].split()) >= 8, key


def test_every_arn_names_the_partition_by_placeholder() -> None:
    for path in sorted(IAM.glob("*.json")):
        text = path.read_text(encoding="utf-8")
        assert "arn:aws:" not in text, path.name
        for value in _resources(json.loads(text)):
            assert value == "*" or value.startswith("arn:${AWS::Partition}:"), (path.name, value)


def _resources(document: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for statement in document.get("Statement", []):
        resource = statement["Resource"]
        out += [resource] if isinstance(resource, str) else resource
    return out


def test_only_reads_without_a_resource_type_are_granted_on_every_resource() -> None:
    for statement in policy("measurement")["Statement"]:
        actions = statement["Action"]
        actions = [actions] if isinstance(actions, str) else actions
        if statement["Resource"] == "*":
            verbs = {action.split(":", 1)[1] for action in actions}
            assert all(verb.startswith(("Describe", "Get", "List")) for verb in verbs), statement


def test_scaling_targets_and_inference_components_are_scoped() -> None:
    statements = policy("measurement")["Statement"]
    (register,) = [
        s for s in statements if "application-autoscaling:RegisterScalableTarget" in s["Action"]
    ]
    assert register["Resource"].endswith(":application-autoscaling:*:*:scalable-target/*")
    assert register["Condition"]["StringEquals"]["application-autoscaling:service-namespace"] == (
        "sagemaker"
    )
    for statement in statements:
        actions = statement["Action"]
        if any("InferenceComponent" in a for a in actions):
            components = [r for r in statement["Resource"] if ":inference-component/" in r]
            assert components == [
                "arn:${AWS::Partition}:sagemaker:*:*:inference-component/speech-*"
            ]


def test_what_a_run_calls_on_moto_is_in_the_policy(clients: AwsClients, tmp_path: Path) -> None:
    seen = record_operations(
        clients.sagemaker, clients.autoscaling, clients.cloudwatch, clients.logs
    )
    run_control_plane(clients, tmp_path)
    called = {
        f"{SERVICES[c.meta.service_model.service_name]}:{name}"
        for c, name in seen_by_client(clients, seen)
    }
    assert {"sagemaker:AddTags", "application-autoscaling:RegisterScalableTarget"} <= called
    assert called <= actions_of(package_sites()), sorted(called - actions_of(package_sites()))
    assert called <= granted("measurement")


def seen_by_client(clients: AwsClients, names: list[str]) -> list[tuple[BaseClient, str]]:
    """(client, operation) for each recorded name, found in the one service that has it."""
    out = []
    for name in names:
        for client in (clients.sagemaker, clients.autoscaling, clients.cloudwatch, clients.logs):
            if name in client.meta.service_model.operation_names:
                out.append((client, name))
                break
    return out
