"""`tts-bench ttotal`: the scale-out timeline of one more instance."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_tts_scaling.option_table import add_to_argparse, specs_named
from pytest_tts_scaling.options import RunOptions

FLAGS = (
    "--endpoint",
    "--model-dir",
    "--scenario",
    "--model",
    "--transport",
    "--hold-s",
    "--measure-s",
    "--artifacts-dir",
    "--allow-config-mismatch",
    "--force",
    "--mlflow",
    "--mlflow-experiment",
    "--mlflow-run-name",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ttotal",
        help="measure T_total: from asking for one more instance to healthy traffic",
        description="Force one more instance under a closed-loop probe at a rung the qmax "
        "artifact measured and time every stage. Without --endpoint, one more local container.",
    )
    (qmax,) = specs_named("--qmax-artifact")
    parser.add_argument(
        qmax.flag, **{**qmax.kwargs(), "help": "the qmax artifact of this endpoint (required)"}
    )
    add_to_argparse(parser, specs_named(*FLAGS))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.endpoints.factory import open_endpoint
    from pytest_tts_scaling.steps.tracking import record_ttotal
    from pytest_tts_scaling.steps.ttotal import run_ttotal, summary_lines
    from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs

    values = {k: v for k, v in vars(args).items() if k.startswith("tts_")}
    inputs = TtotalInputs.from_options(RunOptions.from_namespace(values))
    with open_endpoint(inputs.target, log=print) as endpoint:
        artifact, path = run_ttotal(endpoint, inputs, progress=lambda line: print(line, flush=True))
    for line in [
        *summary_lines(artifact, path),
        *record_ttotal(artifact, path, inputs.tracking, endpoint.name),
    ]:
        print(line)
    return 0
