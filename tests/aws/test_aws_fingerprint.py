"""The deployed fingerprint: endpoint → config → model, digest, environment and slug."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import boto3
from botocore.stub import Stubber

from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.fingerprint import EndpointNotFound, image_digest, read_deployment
from pytest_tts_scaling.errors import InputError
from tests.aws.aws_helpers import DIGEST, deploy, unique


def test_reads_instance_type_digest_and_env_from_moto(clients: AwsClients) -> None:
    d = deploy(unique(), instance_type="ml.m5.xlarge", env={"QUEUE_MAX_DEPTH": "50", "X": "1"})
    deployment = read_deployment(clients.sagemaker, d.endpoint)
    assert deployment.instance_type == "ml.m5.xlarge"
    assert deployment.image_digest == DIGEST
    assert deployment.container_env == {"QUEUE_MAX_DEPTH": "50", "X": "1"}
    assert deployment.slug == "m5xlarge-8b1b96bc"
    assert deployment.variant == "AllTraffic"
    assert deployment.status == "InService"
    config = deployment.deployed_config()
    assert (config.instance_type, config.image_digest) == ("ml.m5.xlarge", DIGEST)


def test_image_by_tag_uses_the_tag(clients: AwsClients) -> None:
    d = deploy(unique(), image="123456789012.dkr.ecr.us-east-1.amazonaws.com/speech:v3")
    assert read_deployment(clients.sagemaker, d.endpoint).image_digest == "v3"


@pytest.mark.parametrize(
    ("uri", "deployed", "expected"),
    [
        ("repo@sha256:abc", None, "sha256:abc"),
        ("host:5000/repo:v7", None, "v7"),
        ("host:5000/repo", None, "latest"),
        (
            "repo:v7",
            [{"SpecifiedImage": "repo:v7", "ResolvedImage": "repo@sha256:def"}],
            "sha256:def",
        ),
        ("repo:v7", [{"SpecifiedImage": "repo:v7"}], "v7"),
    ],
)
def test_image_digest(uri: str, deployed: list[dict[str, str]] | None, expected: str) -> None:
    assert image_digest(uri, deployed) == expected


def test_resolved_image_digest_from_describe_endpoint(aws_env: dict[str, str]) -> None:
    sagemaker = boto3.client("sagemaker")
    resolved = "sha256:" + "1234abcd" * 8
    with Stubber(sagemaker) as stub:
        stub.add_response(
            "describe_endpoint",
            {
                "EndpointName": "speech-x",
                "EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/speech-x",
                "EndpointConfigName": "cfg",
                "EndpointStatus": "InService",
                "ProductionVariants": [
                    {
                        "VariantName": "AllTraffic",
                        "CurrentInstanceCount": 1,
                        "DesiredInstanceCount": 1,
                        "DeployedImages": [
                            {"SpecifiedImage": "repo:latest", "ResolvedImage": f"repo@{resolved}"}
                        ],
                    }
                ],
                "CreationTime": "2026-01-01T00:00:00Z",
                "LastModifiedTime": "2026-01-01T00:00:00Z",
            },
        )
        stub.add_response(
            "describe_endpoint_config",
            {
                "EndpointConfigName": "cfg",
                "EndpointConfigArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint-config/cfg",
                "ProductionVariants": [
                    {"VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.g5.xlarge"}
                ],
                "CreationTime": "2026-01-01T00:00:00Z",
            },
        )
        stub.add_response(
            "describe_model",
            {
                "ModelName": "m",
                "ModelArn": "arn:aws:sagemaker:us-east-1:123456789012:model/m",
                "CreationTime": "2026-01-01T00:00:00Z",
                "Containers": [{"Image": "repo:latest", "Environment": {"QUEUE_MAX_DEPTH": "0"}}],
            },
        )
        deployment = read_deployment(sagemaker, "speech-x")
    assert deployment.image_digest == resolved
    assert deployment.slug == "g5xlarge-1234abcd"
    assert deployment.container_env == {"QUEUE_MAX_DEPTH": "0"}


def test_unknown_endpoint_is_one_line_input_error(clients: AwsClients) -> None:
    with pytest.raises(EndpointNotFound, match="not found") as caught:
        read_deployment(clients.sagemaker, unique("gone"))
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, InputError)
