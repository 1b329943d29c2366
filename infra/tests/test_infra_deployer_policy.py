"""The deploy policy docs/iam.md shows covers the roles CDK's default synthesizer assumes,
in whichever partition the account is (the file names it `${AWS::Partition}`)."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

from aws_cdk import DefaultStackSynthesizer

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "infra" / "iam" / "deployer.json"
PARTITIONS = ("aws", "aws-cn", "aws-us-gov")


def concrete(
    template: str,
    region: str = "eu-west-1",
    account: str = "123456789012",
    partition: str = "aws",
) -> str:
    """A synthesizer ARN template with its placeholders filled, as one account would see it."""
    return (
        template.replace("${AWS::Partition}", partition)
        .replace("${AWS::AccountId}", account)
        .replace("${AWS::Region}", region)
        .replace("${Qualifier}", DefaultStackSynthesizer.DEFAULT_QUALIFIER)
    )


def allowed(action: str, resource: str, partition: str = "aws") -> bool:
    text = POLICY.read_text().replace("${AWS::Partition}", partition)
    statements = json.loads(text)["Statement"]
    return any(
        s["Effect"] == "Allow"
        and s["Action"] == action
        and any(
            fnmatch.fnmatchcase(resource, pattern)
            for pattern in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])
        )
        for s in statements
    )


def test_deployer_can_assume_every_role_cdk_deploy_uses_in_every_partition() -> None:
    for partition in PARTITIONS:
        for template in (
            DefaultStackSynthesizer.DEFAULT_DEPLOY_ROLE_ARN,
            DefaultStackSynthesizer.DEFAULT_FILE_ASSET_PUBLISHING_ROLE_ARN,
            DefaultStackSynthesizer.DEFAULT_IMAGE_ASSET_PUBLISHING_ROLE_ARN,
            DefaultStackSynthesizer.DEFAULT_LOOKUP_ROLE_ARN,
        ):
            role = concrete(template, partition=partition)
            assert allowed("sts:AssumeRole", role, partition), role
    assert not allowed(
        "sts:AssumeRole",
        concrete(DefaultStackSynthesizer.DEFAULT_DEPLOY_ROLE_ARN, partition="aws-cn"),
    )


def test_deployer_reads_the_bootstrap_version_and_nothing_else() -> None:
    parameter = concrete(DefaultStackSynthesizer.DEFAULT_BOOTSTRAP_STACK_VERSION_SSM_PARAMETER)
    assert allowed("ssm:GetParameter", f"arn:aws:ssm:eu-west-1:123456789012:parameter{parameter}")
    assert not allowed("sts:AssumeRole", "arn:aws:iam::123456789012:role/Admin")
    actions = {s["Action"] for s in json.loads(POLICY.read_text())["Statement"]}
    assert actions == {"sts:AssumeRole", "ssm:GetParameter"}


def test_the_iam_page_shows_the_deployer_policy() -> None:
    assert '--8<-- "infra/iam/deployer.json"' in (ROOT / "docs" / "iam.md").read_text()
