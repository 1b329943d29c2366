"""Calibration with the real model: a planted batching fault shows in the word error rate.

    .venv/bin/python benchmarks/garbled_batches.py [--ladder 1,2] [--wer-sample 4] [--out DIR]

Two ``tts-bench qmax`` runs on the local default endpoint with the deadline scheduler batching up
to 4 segments, every ready segment joining (``SCHEDULER=edf BATCH_MAX=4 BATCH_WINDOW_MS=60000``),
each rung's answers transcribed after it (``--wer-sample``), the latency SLO set out of reach so
only the word error rate can fail a rung:

- ``control``: no fault. Truth: every rung's WER within ``--max-wer-increase`` of N=1's.
- ``fault``: ``FAULT_GARBLE_BATCHES=1``, every segment computed in a batch of two or more played
  backwards. N=1 never batches (one stream's segments run one after another), so its WER is the
  control's; from N=2 two streams' segments run as one forward. Truth: N=1 passes, N=2 fails for
  ``wer``, so Q_max is 1, bracketed.

It needs the trained weights (the local default): the untrained development model says no words,
so its WER is 1.0 at every N and nothing can rise. Prints each rung's WER and the verdicts;
exits 1 when a run disagrees with its truth.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from capacity import run_qmax

# Every ready segment joins the forward (a window far past any deadline): with two streams in
# flight their segments meet in every forward, so batches form from N=2 whatever their phase.
# (With the default 1 s window two streams can drift apart and batch only now and then.)
BATCHING = {"SCHEDULER": "edf", "BATCH_MAX": "4", "BATCH_WINDOW_MS": "60000"}
RUNS = {"control": {}, "fault": {"FAULT_GARBLE_BATCHES": "1"}}
# Out of reach on any CPU: the latency SLO never decides a rung here.
SLO_MS = 600_000.0


def measure(name: str, args: argparse.Namespace) -> dict[str, Any] | None:
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **BATCHING, **RUNS[name], "PYTHONUNBUFFERED": "1"}
    print(f"== {name}: {' '.join(f'{k}={v}' for k, v in {**BATCHING, **RUNS[name]}.items())}")
    started = time.monotonic()
    artifact = run_qmax(
        out,
        env,
        args.timeout_s,
        "",
        *("--ladder", args.ladder, "--slo-ms", f"{SLO_MS:g}"),
        *("--hold-s", f"{args.hold_s:g}", "--measure-s", f"{args.measure_s:g}"),
        *("--wer-sample", str(args.wer_sample)),
        *("--max-wer-increase", f"{args.max_wer_increase:g}"),
    )
    if artifact is None:
        return None
    weights = artifact["deployed_config"].get("weights")
    print(f"   {time.monotonic() - started:.0f} s, weights {weights}")
    for rung in sorted(artifact["rungs"], key=lambda r: r["concurrency"]):
        verdict = (
            "pass"
            if rung["meets_slo"]
            else f"fail ({rung['fail_reason'] or rung['unusable_reason']})"
        )
        print(
            f"   N={rung['concurrency']:<2} WER {_num(rung.get('wer'))} (N=1 on the same texts "
            f"{_num(rung.get('wer_at_c1'))}, {rung.get('wer_sampled', 0)} answers), "
            f"p95 TTFAB {_num(rung['ttfab_ms'].get('p95'), '.0f')} ms: {verdict}"
        )
    return artifact


def holds(name: str, artifact: dict[str, Any] | None) -> bool:
    if artifact is None:
        return False
    rungs = {r["concurrency"]: r for r in artifact["rungs"]}
    if name == "control":
        return all(r["meets_slo"] for r in rungs.values())
    first, second = rungs.get(1), rungs.get(2)
    return bool(
        first is not None
        and first["meets_slo"]
        and second is not None
        and second["fail_reason"] == "wer"
        and artifact["q_max"] == 1
        and artifact["q_max_bracketed"]
    )


def _num(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", default="1,2", help="rungs of both runs. Default: 1,2")
    parser.add_argument("--wer-sample", type=int, default=4, help="answers per rung. Default: 4")
    parser.add_argument("--max-wer-increase", type=float, default=0.1, help="Default: 0.1")
    parser.add_argument("--hold-s", type=float, default=30.0, help="Default: 30")
    parser.add_argument("--measure-s", type=float, default=20.0, help="Default: 20")
    parser.add_argument("--timeout-s", type=float, default=1500.0, help="per run. Default: 1500")
    parser.add_argument("--runs", default="control,fault", help="Default: control,fault")
    parser.add_argument("--out", type=Path, default=Path("reports/garbled-batches"))
    args = parser.parse_args()
    wrong = []
    for name in args.runs.split(","):
        if name not in RUNS:
            parser.error(f"--runs: unknown run {name!r}: expected names from {', '.join(RUNS)}")
        ok = holds(name, measure(name, args))
        print(f"   {name}: {'as the truth says' if ok else 'NOT as the truth says'}")
        if not ok:
            wrong.append(name)
    if wrong:
        print(f"WRONG: {', '.join(wrong)}")
        return 1
    print("all runs as the truth says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
