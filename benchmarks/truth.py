"""Is qmax exact? The calibration matrix measured for real, against each server's known truth.

    .venv/bin/python benchmarks/truth.py [--cases serial,4-slot,...|fast] [--hold-s 3] [-v]

Each case (pytest_tts_scaling/calibration/cases.py) starts its reference server on 127.0.0.1 and
runs the real measurement (`run_ladder` with a URL endpoint) twice: the adaptive search (no
--ladder) and the exhaustive ladder of every integer 1..Q_max+1 at the same hold. A case is right
when both give the truth (Q_max, bracketed; or every rung failing for the named reason; or a
clear endpoint error). Goal: the adaptive run takes at most 1/3 of the exhaustive
one's wall time where Q_max ≥ 10. Exits 1 when any case is wrong.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from pytest_tts_scaling.calibration.cases import BY_NAME, CASES, Case
from pytest_tts_scaling.steps.qmax.calibration import Measurement, integer_ladder, measure

RATIO_GOAL = 1 / 3
RATIO_FROM_QMAX = 10


def cases_named(value: str) -> list[Case]:
    if value == "all":
        return list(CASES)
    if value == "fast":
        return [c for c in CASES if c.fast]
    unknown = [name for name in value.split(",") if name not in BY_NAME]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown case {', '.join(unknown)}: expected all, fast or names from "
            f"{', '.join(BY_NAME)}"
        )
    return [BY_NAME[name] for name in value.split(",")]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def row(*cells: object) -> str:
    widths = (14, 17, 13, 13, 9, 7, 8, 6, 5, 3)
    return " | ".join(f"{c!s:<{w}}" for c, w in zip(cells, widths, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        type=cases_named,
        default=list(CASES),
        metavar="NAMES",
        help="comma-separated case names, `fast` or `all`. Default: all",
    )
    parser.add_argument(
        "--hold-s",
        type=float,
        default=3.0,
        metavar="S",
        help="seconds each rung is held, the last 2/3 measured. Default: 3",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every rung")
    args = parser.parse_args()
    progress = (lambda line: print("    " + line, flush=True)) if args.verbose else (lambda _: None)

    print(f"calibration matrix: hold {args.hold_s:g} s per rung; {load()}")
    print(
        row(
            "case",
            "truth",
            "adaptive",
            "fixed",
            "bracketed",
            "wall ad",
            "wall fix",
            "ratio",
            "rungs",
            "ok",
        )
    )
    wrong: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tts-truth-") as tmp:
        for case in args.cases:
            truth = case.truth()
            runs: dict[str, Measurement] = {}
            for arm, ladder in (("adaptive", None), ("fixed", integer_ladder(case))):
                runs[arm] = measure(
                    case,
                    ladder=ladder,
                    hold_s=args.hold_s,
                    artifacts_dir=Path(tmp) / case.name / arm,
                    progress=progress,
                )
            adaptive, fixed = runs["adaptive"], runs["fixed"]
            ok = adaptive.outcome.matches(truth) and fixed.outcome.matches(truth)
            if not ok:
                wrong.append(case.name)
            ratio = adaptive.wall_s / fixed.wall_s if fixed.wall_s > 0 else float("nan")
            goal = (
                ""
                if (truth.q_max or 0) < RATIO_FROM_QMAX
                else (" ✓" if ratio <= RATIO_GOAL else " ✗")
            )
            expected = (
                "endpoint error"
                if truth.endpoint_error
                else f"none ({truth.failing_reason})"
                if truth.failing_reason
                else f"{truth.q_max} ({truth.source})"
            )
            print(
                row(
                    case.name,
                    expected,
                    adaptive.outcome.text(),
                    fixed.outcome.text(),
                    f"{_yes(adaptive.outcome.bracketed)}/{_yes(fixed.outcome.bracketed)}",
                    f"{adaptive.wall_s:.1f}",
                    f"{fixed.wall_s:.1f}",
                    f"{ratio:.2f}{goal}",
                    f"{adaptive.rungs}/{fixed.rungs}",
                    "yes" if ok else "NO",
                ),
                flush=True,
            )
            for arm, run in runs.items():
                if run.outcome.error is not None:
                    print(f"    {arm}: {run.outcome.error[:200]}", flush=True)
                elif not run.outcome.matches(truth):
                    print(f"    {arm} rungs: {'; '.join(run.story)}", flush=True)
    print(f"took {time.monotonic() - started:.0f} s; {load()}")
    if wrong:
        print(f"WRONG: {', '.join(wrong)}")
        return 1
    print(f"all {len(args.cases)} cases exact")
    return 0


def _yes(value: bool) -> str:
    return "y" if value else "n"


if __name__ == "__main__":
    sys.exit(main())
