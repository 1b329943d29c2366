"""The weights-sync custom resource handler, against botocore's Stubber for CodeBuild."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import json
from collections.abc import Iterator
from typing import Any

import boto3
from botocore.stub import Stubber
from speech_infra.handlers.weights_sync import is_complete, on_event

PROPS = {
    "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider",
    "ProjectName": "WeightsSyncProject",
    "ModelName": "kokoro-82m",
    "RepoId": "hexgrad/Kokoro-82M",
    "Revision": "0123456789abcdef0123456789abcdef01234567",
    "AllowPatterns": ["config.json", "*.pth", "voices/*.pt"],
    "S3Uri": "s3://bucket/models/kokoro-82m/0123456789abcdef0123456789abcdef01234567/",
}
BUILD_ID = "WeightsSyncProject:1b2c"


@pytest.fixture
def codebuild() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client(
        "codebuild",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def expect_start(stubber: Stubber, props: dict[str, Any]) -> None:
    stubber.add_response(
        "start_build",
        {"build": {"id": BUILD_ID, "buildStatus": "IN_PROGRESS"}},
        {
            "projectName": props["ProjectName"],
            "environmentVariablesOverride": [
                {"name": "MODEL_NAME", "value": props["ModelName"], "type": "PLAINTEXT"},
                {"name": "HF_REPO_ID", "value": props["RepoId"], "type": "PLAINTEXT"},
                {"name": "HF_REVISION", "value": props["Revision"], "type": "PLAINTEXT"},
                {
                    "name": "HF_ALLOW_PATTERNS",
                    "value": json.dumps(props["AllowPatterns"]),
                    "type": "PLAINTEXT",
                },
                {"name": "S3_URI", "value": props["S3Uri"], "type": "PLAINTEXT"},
            ],
        },
    )


def test_create_starts_a_build_keyed_on_model_and_revision(codebuild: tuple[Any, Stubber]) -> None:
    client, stubber = codebuild
    expect_start(stubber, PROPS)
    result = on_event({"RequestType": "Create", "ResourceProperties": PROPS}, None, client)
    assert result == {
        "PhysicalResourceId": f"kokoro-82m@{PROPS['Revision']}",
        "Data": {"BuildId": BUILD_ID, "S3Uri": PROPS["S3Uri"]},
    }


def test_a_new_revision_syncs_again(codebuild: tuple[Any, Stubber]) -> None:
    client, stubber = codebuild
    new = PROPS | {"Revision": "f" * 40, "S3Uri": f"s3://bucket/models/kokoro-82m/{'f' * 40}/"}
    expect_start(stubber, new)
    event = {"RequestType": "Update", "ResourceProperties": new, "OldResourceProperties": PROPS}
    result = on_event(event, None, client)
    assert result["PhysicalResourceId"] == f"kokoro-82m@{'f' * 40}"


def test_same_revision_does_not_sync_again(codebuild: tuple[Any, Stubber]) -> None:
    client, _ = codebuild  # no response queued: any CodeBuild call fails the test
    renamed = PROPS | {"ProjectName": "Renamed"}
    event = {"RequestType": "Update", "ResourceProperties": renamed, "OldResourceProperties": PROPS}
    result = on_event(event, None, client)
    assert "BuildId" not in result["Data"]
    assert is_complete(event | result, None, client) == {"IsComplete": True}


def test_delete_keeps_the_weights(codebuild: tuple[Any, Stubber]) -> None:
    client, _ = codebuild
    event = {"RequestType": "Delete", "ResourceProperties": PROPS, "PhysicalResourceId": "x@y"}
    assert on_event(event, None, client) == {"PhysicalResourceId": "x@y"}
    assert is_complete(event, None, client) == {"IsComplete": True}


def polled(status: str) -> dict[str, Any]:
    return {
        "builds": [
            {
                "id": BUILD_ID,
                "buildStatus": status,
                "logs": {"deepLink": "https://console/logs"},
            }
        ]
    }


def waiting_event() -> dict[str, Any]:
    return {
        "RequestType": "Create",
        "ResourceProperties": PROPS,
        "PhysicalResourceId": "kokoro-82m@rev",
        "Data": {"BuildId": BUILD_ID, "S3Uri": PROPS["S3Uri"]},
    }


def test_is_complete_waits_while_the_build_runs(codebuild: tuple[Any, Stubber]) -> None:
    client, stubber = codebuild
    stubber.add_response("batch_get_builds", polled("IN_PROGRESS"), {"ids": [BUILD_ID]})
    assert is_complete(waiting_event(), None, client) == {"IsComplete": False}


def test_is_complete_when_the_build_succeeded(codebuild: tuple[Any, Stubber]) -> None:
    client, stubber = codebuild
    stubber.add_response("batch_get_builds", polled("SUCCEEDED"), {"ids": [BUILD_ID]})
    result = is_complete(waiting_event(), None, client)
    assert result == {"IsComplete": True, "Data": {"S3Uri": PROPS["S3Uri"], "BuildId": BUILD_ID}}


@pytest.mark.parametrize("status", ["FAILED", "FAULT", "STOPPED", "TIMED_OUT"])
def test_a_failed_build_fails_the_deployment_with_its_logs(
    codebuild: tuple[Any, Stubber], status: str
) -> None:
    client, stubber = codebuild
    stubber.add_response("batch_get_builds", polled(status), {"ids": [BUILD_ID]})
    with pytest.raises(RuntimeError, match=f"ended {status}; see https://console/logs"):
        is_complete(waiting_event(), None, client)
