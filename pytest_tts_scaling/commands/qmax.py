"""`tts-bench qmax`: the closed-loop ladder from the command line, as `pytest -m qmax` runs it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pytest_tts_scaling.option_table import add_to_argparse, specs_named
from pytest_tts_scaling.options import RunOptions

if TYPE_CHECKING:
    from pytest_tts_scaling.steps.qmax import LadderResult
    from pytest_tts_scaling.steps.qmax.inputs import GateInputs

FLAGS = (
    "--endpoint",
    "--model-dir",
    "--endpoint-url",
    "--scenario",
    "--inference-component",
    "--model",
    "--transport",
    "--slo-ms",
    "--slo-metric",
    "--ladder",
    "--max-concurrency",
    "--hold-s",
    "--measure-s",
    "--gap-s",
    "--runs",
    "--min-qmax",
    "--fail-on-inconclusive",
    "--no-confirm",
    "--invocation-limit-s",
    "--dry-run",
    "--artifacts-dir",
    "--allow-shallow-queue",
    "--wer-sample",
    "--max-wer",
    "--max-wer-increase",
    "--force",
    "--baseline",
    "--regression-tolerance",
    "--allow-config-mismatch",
    "--mlflow",
    "--mlflow-experiment",
    "--mlflow-run-name",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "qmax",
        help="measure Q_max with a closed-loop concurrency ladder",
        description="Measure Q_max: the most concurrent requests one instance holds within the "
        "p95 TTFAB SLO. Without --endpoint/--endpoint-url a local container is started. "
        "With --baseline FILE the result is then held against that qmax artifact (as "
        "`tts-bench compare` does) and a regression exits 1. With --mlflow the run is recorded in "
        "MLflow once the artifacts are written.",
    )
    add_to_argparse(parser, specs_named(*FLAGS))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.endpoints.factory import open_endpoint
    from pytest_tts_scaling.steps.baseline import (
        check_endpoint,
        compare_with_baseline,
        load_baseline,
    )
    from pytest_tts_scaling.steps.qmax import run_ladder
    from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
    from pytest_tts_scaling.steps.qmax.words import describe_schedule
    from pytest_tts_scaling.steps.tracking import record_qmax

    values = {k: v for k, v in vars(args).items() if k.startswith("tts_")}
    inputs = QmaxInputs.from_options(RunOptions.from_namespace(values))
    baseline = load_baseline(inputs)
    if inputs.outputs.dry_run:
        for line in describe_schedule(inputs):
            print(line)
        return 0
    with open_endpoint(inputs.target, log=print) as endpoint:
        if baseline is not None:
            check_endpoint(baseline, inputs.gates, endpoint)
        with endpoint.frozen() as frozen:
            result = run_ladder(frozen, inputs, progress=lambda line: print(line, flush=True))
    for line in result.summary_lines():
        print(line)
    comparison = None
    if baseline is not None:
        comparison = compare_with_baseline(baseline, result, inputs.gates)
        for line in comparison.lines():
            print(line)
    code = gate(result, inputs.gates, regressed=comparison is not None and not comparison.ok)
    for line in record_qmax(result, inputs, comparison):
        print(line)
    return code


def gate(result: LadderResult, gates: GateInputs, *, regressed: bool) -> int:
    """The exit code: 1 for no Q_max, a Q_max below --min-qmax, an inconclusive answer with
    --fail-on-inconclusive, or a regression against the baseline."""
    from pytest_tts_scaling.core.next_step import next_step_line
    from pytest_tts_scaling.core.verdicts import doubt_line
    from pytest_tts_scaling.steps.baseline import below_minimum
    from pytest_tts_scaling.steps.qmax.words import no_qmax_message

    if result.artifact.q_max is None:
        print(f"qmax: FAIL: {no_qmax_message(result.artifact)}")
        if (step := next_step_line(result.artifact, "tts-bench")) is not None:
            print(f"qmax: {step}")
        return 1
    if (floor := below_minimum(result.artifact, gates)) is not None:
        print(f"qmax: FAIL: {floor}")
        return 1
    if doubt_line(result.artifact) is not None and gates.fail_on_inconclusive:
        print("qmax: FAIL: the answer is inconclusive (--fail-on-inconclusive)")
        return 1
    return 1 if regressed else 0
