"""`tts-bench thaw`: restore an endpoint's scaling after a run that could not (a hard kill).

From the freeze snapshot when there is one, else by clearing every suspension. Idempotent:
on an endpoint that is not frozen it changes nothing and exits 0.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_tts_scaling.commands.drift import add_option
from pytest_tts_scaling.options import RunOptions, add_to_argparse, endpoint_name, specs_named


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "thaw",
        help="restore scaling suspended by an interrupted qmax/ttotal run",
        description="Restore the scalable target's SuspendedState from the freeze snapshot "
        "(ARTIFACTS_DIR/.freeze-ENDPOINT.json) or, without one, set all three flags to false; "
        "with --inference-component, the component's. "
        "Safe to run any number of times; removes the snapshot when done.",
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
    parser.add_argument(
        "--restore-capacity",
        action="store_true",
        default=False,
        help="Also put the desired instance count (or copy count) back to the snapshot's. "
        "Default: off.",
    )
    add_to_argparse(parser, specs_named("--artifacts-dir"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.aws.clients import AwsClients
    from pytest_tts_scaling.aws.freeze import thaw

    options = RunOptions.from_namespace(vars(args))
    assert options.endpoint is not None
    thaw(
        AwsClients(),
        options.endpoint,
        artifacts_dir=options.artifacts_dir,
        restore_capacity=bool(options.extra.get("restore_capacity")),
        log=print,
        component=options.inference_component,
    )
    print(f"thawed {options.endpoint}")
    return 0
