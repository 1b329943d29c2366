"""Custom resource ``Custom::ModelWeightsSync``: run the CodeBuild sync once per pinned revision.

Runs in AWS Lambda (Python runtime, boto3 provided) behind the CDK Provider framework:
``on_event`` starts a build, ``is_complete`` polls it until it succeeds or fails. The physical id
is ``{model}@{revision}``, so a new revision is a new resource: CloudFormation updates it (a new
build into a new prefix) and then deletes the old one, which keeps its weights in S3 (deletion
never removes weights; the bucket is retained as well).
"""

from __future__ import annotations

import json
from typing import Any

# Properties that decide what lands in S3; changing any of them syncs again.
SYNC_KEYS = ("ModelName", "RepoId", "Revision", "AllowPatterns", "S3Uri")
FAILED = {"FAILED", "FAULT", "STOPPED", "TIMED_OUT"}


def _client(client: Any) -> Any:
    if client is not None:
        return client
    import boto3  # in the Lambda runtime; imported late so tests can inject a stub

    return boto3.client("codebuild")


def physical_id(props: dict[str, Any]) -> str:
    return f"{props['ModelName']}@{props['Revision']}"


def on_event(event: dict[str, Any], context: object = None, client: Any = None) -> dict[str, Any]:
    props = event["ResourceProperties"]
    request = event["RequestType"]
    if request == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    if request == "Update":
        old = event.get("OldResourceProperties", {})
        if all(old.get(key) == props.get(key) for key in SYNC_KEYS):
            # Same revision, same destination: nothing to fetch (e.g. only the project changed).
            return {"PhysicalResourceId": physical_id(props), "Data": {"S3Uri": props["S3Uri"]}}
    overrides = {
        "MODEL_NAME": props["ModelName"],
        "HF_REPO_ID": props["RepoId"],
        "HF_REVISION": props["Revision"],
        "HF_ALLOW_PATTERNS": json.dumps(props["AllowPatterns"]),
        "S3_URI": props["S3Uri"],
    }
    build = _client(client).start_build(
        projectName=props["ProjectName"],
        environmentVariablesOverride=[
            {"name": name, "value": value, "type": "PLAINTEXT"} for name, value in overrides.items()
        ],
    )["build"]
    return {
        "PhysicalResourceId": physical_id(props),
        "Data": {"BuildId": build["id"], "S3Uri": props["S3Uri"]},
    }


def is_complete(
    event: dict[str, Any], context: object = None, client: Any = None
) -> dict[str, Any]:
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    data = event.get("Data") or {}
    build_id = data.get("BuildId")
    if not build_id:
        return {"IsComplete": True}
    builds = _client(client).batch_get_builds(ids=[build_id])["builds"]
    if not builds:
        raise RuntimeError(f"weights sync build {build_id} not found")
    build = builds[0]
    status = build["buildStatus"]
    if status == "SUCCEEDED":
        return {"IsComplete": True, "Data": {"S3Uri": data.get("S3Uri", ""), "BuildId": build_id}}
    if status in FAILED:
        link = (build.get("logs") or {}).get("deepLink", "the project's CloudWatch logs")
        raise RuntimeError(f"weights sync build {build_id} ended {status}; see {link}")
    return {"IsComplete": False}
