"""`tts-bench plan`: the policy from the qmax and ttotal artifacts, offline (docs/steps.md#plan).

Prints the report and the paste-ready registry entry and writes ``plan-{model}.json`` (an earlier,
different one is kept aside under a timestamped name; the same plan again stays put). Exit 0
for a plan with verdict ok or warn, 1 for stop, 2 for bad input (raised as InputError).
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_tts_scaling.option_table import add_to_argparse, specs_named
from pytest_tts_scaling.options import RunOptions

FLAGS = (
    "--qmax-artifact",
    "--ttotal-artifact",
    "--prices",
    "--hourly-rps",
    "--peak-rps",
    "--trough-rps",
    "--min-floor",
    "--surge-ratio",
    "--slo-ms",
    "--allow-config-mismatch",
    "--artifacts-dir",
    "--mlflow",
    "--mlflow-experiment",
    "--mlflow-run-name",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="derive thresholds, cooldowns and fleet size from qmax and ttotal artifacts",
        description="Turn a qmax and a ttotal artifact into the autoscaling policy: thresholds, "
        "cooldowns, fleet size and findings, each checked by simulating the fleet. Given a pair "
        "per instance type and --prices, plan each and keep the cheapest that meets the SLO and "
        "the surge rule, the others beside it. Offline: calls nothing. Writes plan-MODEL.json "
        "to --artifacts-dir and prints the registry entry.",
    )
    add_to_argparse(parser, specs_named(*FLAGS))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.core.plan import report_lines
    from pytest_tts_scaling.steps.plan import PlanStepInputs, run_plan
    from pytest_tts_scaling.steps.tracking import record_plan

    values = {k: v for k, v in vars(args).items() if k.startswith("tts_")}
    inputs = PlanStepInputs.from_options(RunOptions.from_namespace(values))
    result = run_plan(inputs)
    for line in report_lines(result.plan):
        print(line)
    for line in result.kept:
        print(f"plan: {line}")
    print(f"plan written to {result.path}")
    print("paste into infra/speech_infra/registry.py REGISTRY:")
    print(result.plan.config_block)
    for line in record_plan(result, inputs.tracking):
        print(line)
    if result.stops:
        print(f"plan: FAIL: verdict stop ({', '.join(f.name for f in result.stops)})")
        return 1
    return 0
