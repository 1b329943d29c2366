"""`tts-bench qmax`: the closed-loop ladder from the command line, as `pytest -m qmax` runs it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pytest_tts_scaling.option_table import add_to_argparse, specs_named
from pytest_tts_scaling.options import ResolvedOptions, RunOptions

if TYPE_CHECKING:
    from pytest_tts_scaling.core.schema import QmaxArtifact

FLAGS = (
    "--endpoint",
    "--model-dir",
    "--endpoint-url",
    "--scenario",
    "--inference-component",
    "--model",
    "--transport",
    "--slo-ms",
    "--ladder",
    "--max-concurrency",
    "--hold-s",
    "--measure-s",
    "--gap-s",
    "--runs",
    "--min-qmax",
    "--dry-run",
    "--artifacts-dir",
    "--allow-shallow-queue",
    "--force",
    "--baseline",
    "--regression-tolerance",
    "--allow-config-mismatch",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "qmax",
        help="measure Q_max with a closed-loop concurrency ladder",
        description="Measure Q_max: the most concurrent requests one instance holds within the "
        "p95 TTFAB SLO. Without --endpoint/--endpoint-url a local container is started. "
        "With --baseline FILE the result is then held against that qmax artifact (as "
        "`tts-bench compare` does) and a regression exits 1.",
    )
    add_to_argparse(parser, specs_named(*FLAGS))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.core.compare import check_identity, compare_qmax
    from pytest_tts_scaling.endpoints.factory import open_endpoint
    from pytest_tts_scaling.steps.qmax import run_ladder
    from pytest_tts_scaling.steps.qmax_words import describe_schedule

    values = {k: v for k, v in vars(args).items() if k.startswith("tts_")}
    settings = RunOptions.from_namespace(values).for_kind()
    baseline = load_baseline(settings)
    if settings.run.dry_run:
        for line in describe_schedule(settings):
            print(line)
        return 0
    with open_endpoint(settings.run, log=print) as endpoint:
        if baseline is not None:
            # Before freezing and measuring: the fingerprint is known once the endpoint is open.
            check_identity(
                baseline,
                slug=endpoint.slug,
                allow_mismatch=settings.run.allow_config_mismatch,
                baseline_name=f"baseline {settings.run.baseline}",
                new_name=f"endpoint {endpoint.name}",
            )
        with endpoint.frozen() as frozen:
            result = run_ladder(frozen, settings, progress=lambda line: print(line, flush=True))
    for line in result.summary_lines():
        print(line)
    regressed = False
    if baseline is not None:
        comparison = compare_qmax(
            baseline,
            result.artifact,
            tolerance=settings.run.regression_tolerance,
            allow_config_mismatch=settings.run.allow_config_mismatch,
            baseline_name=f"baseline {settings.run.baseline}",
            new_name=str(result.path),
        )
        for line in comparison.lines():
            print(line)
        regressed = not comparison.ok
    q_max = result.artifact.q_max
    if q_max is None:
        print("qmax: FAIL: no rung met the SLO")
        return 1
    if settings.run.min_qmax is not None and q_max < settings.run.min_qmax:
        print(f"qmax: FAIL: Q_max {q_max} is below --min-qmax {settings.run.min_qmax}")
        return 1
    return 1 if regressed else 0


def load_baseline(settings: ResolvedOptions) -> QmaxArtifact | None:
    """The --baseline artifact, refused early when its model, transport or SLO is not this run's.

    Read before the ladder starts: the new artifact may be written over the same file. The slug
    is checked once the endpoint is open; the whole identity again by :func:`compare_qmax`.
    """
    from pytest_tts_scaling.artifacts import load
    from pytest_tts_scaling.core.compare import check_identity
    from pytest_tts_scaling.core.schema import QmaxArtifact

    run = settings.run
    if run.baseline is None:
        return None
    baseline = load(run.baseline, QmaxArtifact)
    check_identity(
        baseline,
        model=run.model,
        transport=run.transport,
        slo_ms=settings.slo_ms,
        allow_mismatch=run.allow_config_mismatch,
        baseline_name=f"baseline {run.baseline}",
        new_name="this run",
    )
    return baseline
