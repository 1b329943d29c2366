"""The IAM policy docs/iam.md gives tts-bench is exactly what the code calls.

Two views of "what the code calls": every boto3 operation named in `pytest_tts_scaling`'s
source (a call on a SageMaker, Application Auto Scaling, CloudWatch, CloudWatch Logs or runtime
client, or a paginator by name), and the operations a freeze, thaw, drift, validate and
CloudWatch join actually make against moto. The second must be inside the first, and the
page's actions must equal the first: nothing missing, nothing spare.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import botocore.session
from botocore import xform_name
from botocore.client import BaseClient

from pytest_tts_scaling.aws.clients import AwsClients
from tests.aws.aws_helpers import deploy, make_plan, record_operations, unique
from tests.factories import make_rung

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_tts_scaling"
# botocore service -> IAM action prefix; the variable names the code gives each client.
SERVICES = {
    "sagemaker": "sagemaker",
    "sagemaker-runtime": "sagemaker",
    "application-autoscaling": "application-autoscaling",
    "cloudwatch": "cloudwatch",
    "logs": "logs",
}
RECEIVERS = {"sagemaker", "autoscaling", "cloudwatch", "logs", "client"}
PAGINATORS = {"get_paginator", "_paginate"}
# Not in botocore: the HTTP/2 SDK's one operation (aws-sdk-sagemaker-runtime-http2).
HTTP2_OPERATIONS = {
    "invoke_endpoint_with_bidirectional_stream": "sagemaker:InvokeEndpointWithBidirectionalStream"
}


def _operations() -> dict[str, set[str]]:
    session = botocore.session.get_session()
    by_name: dict[str, set[str]] = {}
    for service, prefix in SERVICES.items():
        for operation in session.get_service_model(service).operation_names:
            by_name.setdefault(xform_name(operation), set()).add(f"{prefix}:{operation}")
    for name, action in HTTP2_OPERATIONS.items():
        by_name.setdefault(name, set()).add(action)
    return by_name


def actions_in_code() -> set[str]:
    """IAM actions of every AWS call written in the package's source."""
    operations = _operations()
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else ast.unparse(func)
            if called in PAGINATORS:  # by name: get_paginator("op"), _paginate(client, "op")
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and arg.value in operations:
                        found |= operations[arg.value]
            if isinstance(func, ast.Attribute) and func.attr in operations:
                receiver = ast.unparse(func.value).split(".")[-1]
                if receiver in RECEIVERS:
                    found |= operations[func.attr]
    return found


def readme_policy() -> dict[str, object]:
    text = (ROOT / "docs" / "iam.md").read_text(encoding="utf-8")
    section = text.split("\n## tts-bench\n", 1)[1]
    (block,) = re.findall(r"```json\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    policy = json.loads(block)
    assert isinstance(policy, dict)
    return policy


def readme_actions() -> set[str]:
    statements = readme_policy()["Statement"]
    assert isinstance(statements, list)
    actions: set[str] = set()
    for statement in statements:
        assert statement["Effect"] == "Allow"
        assert statement["Sid"]
        actions |= set(statement["Action"])
    return actions


def test_the_readme_policy_grants_exactly_what_the_code_calls() -> None:
    code, readme = actions_in_code(), readme_actions()
    assert code - readme == set(), f"called but not granted: {sorted(code - readme)}"
    assert readme - code == set(), f"granted but never called: {sorted(readme - code)}"
    assert not any("*" in action for action in readme)


def test_only_reads_are_granted_on_every_resource() -> None:
    for statement in readme_policy()["Statement"]:  # type: ignore[attr-defined]
        if statement["Resource"] == "*":
            verbs = {action.split(":", 1)[1] for action in statement["Action"]}
            assert all(
                verb.startswith(("Describe", "Get", "List")) or verb == "RegisterScalableTarget"
                for verb in verbs
            ), statement


def test_what_a_run_calls_on_moto_is_in_the_policy(clients: AwsClients, tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from pytest_tts_scaling.aws.cloudwatch import annotate_rungs
    from pytest_tts_scaling.aws.drift import run_drift
    from pytest_tts_scaling.aws.freeze import freeze, thaw
    from pytest_tts_scaling.aws.validate import run_validate

    d = deploy(unique(), instances=2)
    seen = record_operations(
        clients.sagemaker, clients.autoscaling, clients.cloudwatch, clients.logs
    )
    with freeze(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None):
        pass
    thaw(clients, d.endpoint, artifacts_dir=tmp_path, log=lambda line: None)
    run_drift(clients, d.endpoint, artifacts_dir=tmp_path, plan=make_plan())
    run_validate(clients, d.endpoint, make_plan())
    now = datetime.now(UTC)
    rung = make_rung(1).model_copy(
        update={
            "window_start": (now - timedelta(minutes=30)).isoformat(),
            "window_end": (now - timedelta(minutes=29)).isoformat(),
        }
    )
    annotate_rungs(
        clients.cloudwatch, [rung], endpoint=d.endpoint, variant="AllTraffic", clock=clients.clock
    )
    prefix = {
        "sagemaker": "sagemaker",
        "application-autoscaling": "application-autoscaling",
        "cloudwatch": "cloudwatch",
        "logs": "logs",
    }
    called = {
        f"{prefix[c.meta.service_model.service_name]}:{name}"
        for c, name in seen_by_client(clients, seen)
    }
    assert {"sagemaker:AddTags", "application-autoscaling:RegisterScalableTarget"} <= called
    assert called <= actions_in_code(), sorted(called - actions_in_code())
    assert called <= readme_actions()


def seen_by_client(clients: AwsClients, names: list[str]) -> list[tuple[BaseClient, str]]:
    """(client, operation) for each recorded name, found in the one service that has it."""
    out = []
    for name in names:
        for client in (clients.sagemaker, clients.autoscaling, clients.cloudwatch, clients.logs):
            if name in client.meta.service_model.operation_names:
                out.append((client, name))
                break
    return out
