"""`tts-bench export ARTIFACT --csv DIR`: an artifact's tables as CSV, offline.

qmax: rungs, and per-request records (joined with their inputs) when the JSONL files it names
lie beside it; ttotal: stages; plan: findings. Exit 0, or 2 for a missing or bad artifact.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write an artifact's rungs and per-request records (or stages, findings) as CSV",
        description="Write the rows of a qmax artifact (one per rung; one per request from the "
        "records beside it), a ttotal artifact (one per stage) or a plan (one per finding) as "
        "CSV files named after the artifact, for spreadsheets and other tools. Nested fields "
        "become dotted columns (ttfab_ms.p95). Offline.",
    )
    parser.add_argument("artifact", type=Path, metavar="ARTIFACT", help="Artifact file (JSON).")
    parser.add_argument(
        "--csv",
        type=Path,
        required=True,
        metavar="DIR",
        help="Directory the CSV files are written to (made if missing).",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.artifacts import load_any
    from pytest_tts_scaling.report.export import export_csv

    done = export_csv(load_any(args.artifact), args.artifact, args.csv)
    for path in done.written:
        print(f"export: {path}")
    for note in done.notes:
        print(f"export: {note}")
    return 0
