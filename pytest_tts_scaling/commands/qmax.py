"""`tts-bench qmax`: the closed-loop ladder from the command line, as `pytest -m qmax` runs it."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_tts_scaling.options import RunOptions, add_to_argparse, specs_named

FLAGS = (
    "--endpoint",
    "--endpoint-url",
    "--model",
    "--transport",
    "--slo-ms",
    "--ladder",
    "--hold-s",
    "--measure-s",
    "--gap-s",
    "--runs",
    "--min-qmax",
    "--dry-run",
    "--artifacts-dir",
    "--allow-shallow-queue",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "qmax",
        help="measure Q_max with a closed-loop concurrency ladder",
        description="Measure Q_max: the most concurrent requests one instance holds within the "
        "p95 TTFAB SLO. Without --endpoint/--endpoint-url a local container is started.",
    )
    add_to_argparse(parser, specs_named(*FLAGS))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.endpoints import open_endpoint
    from pytest_tts_scaling.ladder import describe_schedule, run_ladder

    values = {k: v for k, v in vars(args).items() if k.startswith("tts_")}
    settings = RunOptions.from_namespace(values).for_kind()
    if settings.run.dry_run:
        for line in describe_schedule(settings):
            print(line)
        return 0
    with open_endpoint(settings.run, log=print) as endpoint, endpoint.frozen() as frozen:
        result = run_ladder(frozen, settings, progress=lambda line: print(line, flush=True))
    for line in result.summary_lines():
        print(line)
    q_max = result.artifact.q_max
    if q_max is None:
        print("qmax: FAIL: no rung met the SLO")
        return 1
    if settings.run.min_qmax is not None and q_max < settings.run.min_qmax:
        print(f"qmax: FAIL: Q_max {q_max} is below --min-qmax {settings.run.min_qmax}")
        return 1
    return 0
