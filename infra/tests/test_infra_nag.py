"""cdk-nag AwsSolutions over the whole app: no unsuppressed finding, every suppression reasoned."""

from __future__ import annotations

import csv
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks
from infra_helpers import Synth

# Each suppression is a decision; adding one must show up here and in review.
EXPECTED_SUPPRESSIONS = {
    ("SpeechFoundationStack", "AwsSolutions-IAM5"),  # models/*, endpoint log groups, metrics
    ("SpeechModelCacheStack", "AwsSolutions-CB4"),  # no build artifacts to encrypt
    ("SpeechModelCacheStack", "AwsSolutions-IAM5"),  # models/*, CDK's project log/report grants
    ("SpeechModelCacheStack", "AwsSolutions-IAM4"),  # Provider framework's basic execution role
    ("SpeechModelCacheStack", "AwsSolutions-SF2"),  # X-Ray on the Provider's waiter
    ("SpeechEndpointStack-kokoro-82m", "AwsSolutions-IAM5"),  # ecr:GetAuthorizationToken
}


def nag_rows(outdir: Path) -> dict[str, list[dict[str, str]]]:
    """Rows of each stack's AwsSolutions report, keyed by stack name."""
    reports = {}
    for path in sorted(outdir.glob("AwsSolutions-*-NagReport.csv")):
        stack = path.name.removeprefix("AwsSolutions-").removesuffix("-NagReport.csv").strip("-")
        with path.open(newline="") as handle:
            reports[stack] = list(csv.DictReader(handle))
    return reports


def nag_errors(synth: Synth) -> list[tuple[str, str]]:
    return [(path, text) for path, text in synth.messages("error") if "AwsSolutions-" in text]


@pytest.fixture(params=["no_plan", "with_plan"])
def synth(request: pytest.FixtureRequest) -> Synth:
    result: Synth = request.getfixturevalue(request.param)
    return result


def test_no_unsuppressed_nag_errors(synth: Synth) -> None:
    assert nag_errors(synth) == []


def test_every_stack_has_a_nag_report_without_non_compliant_rows(synth: Synth) -> None:
    reports = nag_rows(synth.outdir)
    assert set(reports) == set(synth.stack_names())
    for stack, rows in reports.items():
        assert rows, f"{stack}: empty nag report"
        failing = [row for row in rows if row["Compliance"] == "Non-Compliant"]
        assert failing == [], stack


def test_every_suppression_carries_a_reason(synth: Synth) -> None:
    for rows in nag_rows(synth.outdir).values():
        for row in rows:
            if row["Compliance"] == "Suppressed":
                reason = row["Exception Reason"].split("] ", 1)[-1]
                assert len(reason.split()) >= 8, row


def test_suppressions_are_the_reviewed_ones(no_plan: Synth) -> None:
    suppressed = {
        (stack, row["Rule ID"])
        for stack, rows in nag_rows(no_plan.outdir).items()
        for row in rows
        if row["Compliance"] == "Suppressed"
    }
    assert suppressed == EXPECTED_SUPPRESSIONS


def test_autoscaling_adds_no_suppression(no_plan: Synth, with_plan: Synth) -> None:
    def suppressed(synth: Synth) -> set[tuple[str, str]]:
        return {
            (row["Rule ID"], row["Resource ID"])
            for rows in nag_rows(synth.outdir).values()
            for row in rows
            if row["Compliance"] == "Suppressed"
        }

    assert suppressed(with_plan) == suppressed(no_plan)


def test_the_checks_do_find_a_non_compliant_bucket(tmp_path: Path) -> None:
    """The helpers above can fail: an open, unlogged bucket is reported."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Careless")
    s3.Bucket(stack, "Open", block_public_access=s3.BlockPublicAccess.BLOCK_ACLS_ONLY)
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True, reports=True))
    app.synth()
    rows = nag_rows(tmp_path)["Careless"]
    failing = {row["Rule ID"] for row in rows if row["Compliance"] == "Non-Compliant"}
    assert {"AwsSolutions-S1", "AwsSolutions-S10"} <= failing
