"""`tts-bench drift`: read-only preflight of a SageMaker endpoint's scaling (docs/steps.md#drift).

Prints one line per finding and `preflight-ok` when none is an error. Exit 0 when ok (warnings
included), 1 on any error, 2 on bad input.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_tts_scaling.commands.deployed_endpoint import (
    ENDPOINT_HELP,
    add_option,
    with_default_endpoint,
)
from pytest_tts_scaling.option_table import add_to_argparse, specs_named
from pytest_tts_scaling.options import RunOptions


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "drift",
        help="read-only preflight: scaling targets, policies, alarms and status of an endpoint",
        description="Compare what is deployed for a SageMaker endpoint with what it should be: "
        "orphaned or suspended scaling, capacity, inert policies, alarms without data, endpoint "
        "status, freeze snapshots and freeze locks (which run holds the endpoint and whether it "
        "still runs). Changes nothing. Prints preflight-ok when no finding is an error; exits 1 "
        "otherwise.",
    )
    add_option(parser, "--endpoint", help=ENDPOINT_HELP)
    add_option(
        parser,
        "--inference-component",
        help="Also check this inference component: its status, its scalable target "
        "(inference-component/NAME, DesiredCopyCount) and its policies "
        "(ConcurrentRequestsPerCopy); the plan's capacity is then held against its copies. "
        "Default: none.",
    )
    add_to_argparse(parser, specs_named("--model", "--artifacts-dir"))
    add_option(
        parser,
        "--plan-artifact",
        help="Plan whose min/max capacity the scalable target is held against. Default: "
        "ARTIFACTS_DIR/plan-MODEL.json when it exists.",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.steps.deployed import DeployedInputs
    from pytest_tts_scaling.steps.drift import run_drift_step

    options = with_default_endpoint(RunOptions.from_namespace(vars(args)))
    report = run_drift_step(DeployedInputs.from_options(options))
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1
