"""`tts-bench thaw`: restore an endpoint after a run that could not (a hard kill).

Everything the run recorded comes back (suspension flags, min/max capacity, desired count),
from wherever the lock on the endpoint says: its snapshot file, or the values in its tags.
Without any record every suspension is cleared. Idempotent: on an endpoint that is not frozen
it changes nothing and exits 0.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_tts_scaling.commands.deployed_endpoint import add_option
from pytest_tts_scaling.option_table import add_to_argparse, endpoint_name, specs_named
from pytest_tts_scaling.options import RunOptions


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "thaw",
        help="restore an endpoint a killed qmax/ttotal run left frozen",
        description="Restore what the run that froze the endpoint recorded: SuspendedState, "
        "min/max capacity and the desired instance (or copy) count, from the snapshot the "
        "endpoint's lock names (ARTIFACTS_DIR/.freeze-ENDPOINT.json on the machine that ran "
        "it) or from the values in the lock's tags; without any record, set all three flags "
        "to false. With --inference-component, the component's. Safe to run any number of "
        "times; removes the lock and the snapshot when done.",
    )
    parser.add_argument(
        "--endpoint",
        dest="tts_endpoint",
        type=endpoint_name,
        required=True,
        metavar="NAME",
        help="SageMaker endpoint to thaw. Required.",
    )
    add_option(
        parser,
        "--inference-component",
        help="Thaw this inference component (its snapshot ARTIFACTS_DIR/.freeze-ENDPOINT."
        "COMPONENT.json, its target inference-component/NAME) instead of the variant. "
        "Default: none.",
    )
    add_option(
        parser,
        "--force",
        help="Thaw even while the run holding the lock may still be measuring (it runs on "
        "another machine, or its process is alive). Default: off.",
    )
    add_to_argparse(parser, specs_named("--artifacts-dir"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.steps.deployed import DeployedInputs
    from pytest_tts_scaling.steps.thaw import run_thaw_step

    inputs = DeployedInputs.from_options(RunOptions.from_namespace(vars(args)))
    endpoint = run_thaw_step(inputs, log=print)
    print(f"thawed {endpoint}")
    return 0
