"""`tts-bench validate-live`: the plan under live load, one line per check.

With no endpoint named, the rehearsal on a local fleet (a plan measured here, replayed at 1/20 of
its time); with `--endpoint NAME`, the deployed plan's traffic at its own pace against the
SageMaker endpoint. Exit 0 when every check holds, 1 when one fails, 2 on bad input.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_tts_scaling.commands.deployed_endpoint import add_option
from pytest_tts_scaling.option_table import add_to_argparse, specs_named
from pytest_tts_scaling.options import RunOptions


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate-live",
        help="check the plan under live load (a local fleet, or the deployed endpoint)",
        description="Run the plan's traffic and check: p95 TTFAB within the SLO at 80% of the "
        "planned load; rejections "
        "only where an instance already held Q_max; the first new instance serving within "
        "1.5 x T_total; the surge's shed fraction and worst p95 within the plan's simulation; "
        "every scale-in after its cooldown. With no --endpoint, a rehearsal on a local fleet "
        "of calibration instances (about 2 minutes); with --endpoint NAME, the deployed plan "
        "(ARTIFACTS_DIR/plan-MODEL.json or --plan-artifact) at its own pace. Records go to "
        "ARTIFACTS_DIR/validate-live/. Exits 1 when a check fails.",
    )
    add_option(
        parser,
        "--endpoint",
        help="SageMaker endpoint with the plan deployed. Default: none (the rehearsal on a "
        "local fleet).",
    )
    add_to_argparse(
        parser,
        specs_named(
            "--endpoint-url",
            "--inference-component",
            "--model",
            "--transport",
            "--scenario",
            "--artifacts-dir",
        ),
    )
    add_option(
        parser,
        "--plan-artifact",
        help="The deployed plan (with --endpoint). Default: ARTIFACTS_DIR/plan-MODEL.json.",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.steps.deployed import ValidateLiveInputs
    from pytest_tts_scaling.steps.validate_live import checks, run_validate_live

    inputs = ValidateLiveInputs.from_options(RunOptions.from_namespace(vars(args)))
    found = checks(run_validate_live(inputs, print))
    for name, check in found.items():
        print(f"validate_live: {name}: {'ok' if check.ok else 'FAILED'}: {check.detail}")
    failed = [name for name, check in found.items() if not check.ok]
    print(f"validate_live: {len(found) - len(failed)} of {len(found)} checks hold")
    return 1 if failed else 0
