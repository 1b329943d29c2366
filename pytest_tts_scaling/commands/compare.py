"""`tts-bench compare BASELINE NEW`: the regression check of two qmax artifacts, offline.

The same comparison `--baseline` runs after a ladder (rule: :mod:`pytest_tts_scaling.core.compare`).
Exit 0 when nothing regressed, 1 on any regression, 2 on a bad or mismatched artifact.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_tts_scaling.option_table import add_to_argparse, specs_named


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare two qmax artifacts: Q_max and p95 TTFAB per rung against a baseline",
        description="Hold a qmax artifact against a baseline qmax artifact: a lower Q_max, or a "
        "p95 TTFAB at a common rung that rose by more than the noise of the two runs' p95 "
        "confidence intervals allows, is a regression. Prints every check with the baseline "
        "value, the new value and the threshold. Offline. Exits 0 when nothing regressed, 1 on "
        "a regression, 2 on a bad artifact or artifacts of different configurations.",
    )
    parser.add_argument(
        "baseline", type=Path, metavar="BASELINE", help="The baseline qmax artifact (JSON)."
    )
    parser.add_argument("new", type=Path, metavar="NEW", help="The qmax artifact to check (JSON).")
    add_to_argparse(parser, specs_named("--regression-tolerance", "--allow-config-mismatch"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.artifacts import load
    from pytest_tts_scaling.core.compare import compare_qmax
    from pytest_tts_scaling.core.schema import QmaxArtifact

    baseline = load(args.baseline, QmaxArtifact)
    new = load(args.new, QmaxArtifact)
    comparison = compare_qmax(
        baseline,
        new,
        tolerance=args.tts_regression_tolerance,
        allow_config_mismatch=args.tts_allow_config_mismatch,
        baseline_name=f"baseline {args.baseline}",
        new_name=str(args.new),
    )
    for line in comparison.lines():
        print(line)
    return 0 if comparison.ok else 1
