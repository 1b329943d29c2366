"""`tts-bench validate`: the deployed scaling configuration against the plan artifact
(docs/steps.md#validate).

One line per field with the deployed and the planned value. Exit 0 when all match, 1 on any
mismatch, 2 on bad input (a missing or invalid plan, an endpoint that does not exist).
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
        "validate",
        help="check the deployed scaling configuration against the plan artifact",
        description="Read the endpoint's scalable target, policies, alarms and model "
        "environment and compare each value with the plan: target value, scale-in threshold, "
        "both cooldowns, min/max capacity, QUEUE_MAX_DEPTH and the FirstChunkLatencyP95 alarm "
        "threshold; and the policy's shape: the tracked metric, DisableScaleIn, the scale-in "
        "step and its alarm's metric, statistic, period, evaluation periods and comparison. "
        "Changes nothing. Exits 1 on any mismatch.",
    )
    add_option(parser, "--endpoint", help=ENDPOINT_HELP)
    add_option(
        parser,
        "--inference-component",
        help="Validate this inference component's scaling instead of the variant's: the target "
        "on inference-component/NAME (copies), the policy on ConcurrentRequestsPerCopy and the "
        "component's QUEUE_MAX_DEPTH. Default: none.",
    )
    add_to_argparse(parser, specs_named("--model", "--artifacts-dir"))
    add_option(
        parser,
        "--plan-artifact",
        help="The plan artifact. Default: ARTIFACTS_DIR/plan-MODEL.json.",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.steps.deployed import DeployedInputs
    from pytest_tts_scaling.steps.validate import run_validate_step, verdict_line

    options = with_default_endpoint(RunOptions.from_namespace(vars(args)))
    checks = run_validate_step(DeployedInputs.from_options(options))
    for check in checks:
        print(check.line())
    print(verdict_line(checks))
    return 0 if all(c.ok for c in checks) else 1
