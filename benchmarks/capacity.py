"""Capacity of one local container per scheduler mode: Q_max, throughput at Q_max, p95 underrun.

Each mode is one ``tts-bench qmax`` on the local default endpoint (the plugin starts ``tts-serve``
with the mode's settings in its environment, so each artifact's ``container_env`` records the
engine and scheduler), same machine, same workload (``--scenario kokoro-82m``), same ladder. Modes:

- ``synthetic-fifo``, ``synthetic-edf``, ``synthetic-edf-b8``: the synthetic engine (a GPU-like
  cost model, `tts_container.synthetic`) with today's scheduler, with the deadline scheduler,
  and with the deadline scheduler batching up to 8 segments (``synthetic-edf-m250``, not run by
  default: the deadline scheduler with a 250 ms margin, sooner first audio but stalls under load);
- ``trained-fifo``, ``trained-edf``: the trained Kokoro-82M (the local default) on this machine's
  device (batch 1); ``untrained-fifo``, ``untrained-edf``: the untrained development model of the
  same graph, whose durations (and so compute) are not the trained model's unless
  ``FORCE_DURATIONS`` names the trained model's (``benchmarks/gpu.sh``); ``trained-edf-b8``
  and ``untrained-edf-b8`` batch up to 8 segments (for a GPU; not run by default).

Q_max is read at each ``--report-slo-ms`` from the same rungs: the highest usable rung whose p95
TTFAB is within it, below the lowest usable rung that is not (the ladder runs at the largest).
The last column counts a rung whose p95 underrun is above fifo's (same engine and SLO) as failed
too: a scheduler that buys first audio with stalls does not get credit for it.

Run: ``python benchmarks/capacity.py [--modes synthetic-fifo,synthetic-edf] [--out DIR]``.
Every run is bounded: each mode by ``--mode-timeout-s``, the whole run by ``--budget-s``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES: dict[str, dict[str, str]] = {
    "synthetic-fifo": {"ENGINE": "synthetic", "SCHEDULER": "fifo"},
    "synthetic-edf": {"ENGINE": "synthetic", "SCHEDULER": "edf", "BATCH_MAX": "1"},
    "synthetic-edf-b8": {"ENGINE": "synthetic", "SCHEDULER": "edf", "BATCH_MAX": "8"},
    "synthetic-edf-m250": {
        "ENGINE": "synthetic",
        "SCHEDULER": "edf",
        "BATCH_MAX": "1",
        "DEADLINE_MARGIN_MS": "250",
    },
    **{
        f"{weights}-{scheduler}": {
            "ENGINE": "torch",
            "WEIGHTS": weights,
            "SCHEDULER": scheduler,
            **({"BATCH_MAX": batch} if scheduler == "edf" else {}),
        }
        for weights in ("trained", "untrained")
        for scheduler, batch in (("fifo", ""), ("edf", "1"))
    },
    "trained-edf-b8": {
        "ENGINE": "torch",
        "WEIGHTS": "trained",
        "SCHEDULER": "edf",
        "BATCH_MAX": "8",
    },
    "untrained-edf-b8": {
        "ENGINE": "torch",
        "WEIGHTS": "untrained",
        "SCHEDULER": "edf",
        "BATCH_MAX": "8",
    },
}
LADDERS = {
    "synthetic": "1,2,3,4,6,8,10,12,16,20,24,32,40,48",
    "kokoro": "1,2,3,4,5,6,8",
}
# Batching the real model is for the GPU (benchmarks/gpu.sh): on CPU a batch is no faster than
# its parts. The small margin shows the other side of the trade: sooner first audio, stalls.
DEFAULT_MODES = ",".join(m for m in MODES if not m.endswith(("-b8", "-m250")))


@dataclass(frozen=True)
class Figures:
    mode: str
    slo_ms: float
    q_max: int | None
    bracketed: bool
    throughput_rps: float | None
    ttfab_p95_ms: float | None
    underrun_p95_ms: float | None
    # Q_max counting a rung whose p95 underrun is above fifo's (same engine, same SLO) as failed
    q_max_no_more_underrun: int | None


def _p95(summary: dict[str, Any] | None) -> float | None:
    return None if not summary else summary.get("p95")


def qmax_at(
    rungs: list[dict[str, Any]], slo_ms: float, underrun_cap_ms: float | None = None
) -> tuple[dict[str, Any] | None, bool]:
    """The Q_max rung at ``slo_ms`` and whether a usable rung above it failed; with
    ``underrun_cap_ms``, a rung whose p95 underrun is above it fails too."""

    def fails(rung: dict[str, Any]) -> bool:
        if (_p95(rung["ttfab_ms"]) or float("inf")) > slo_ms:
            return True
        underrun = _p95(rung.get("underrun_ms")) or 0.0
        return underrun_cap_ms is not None and underrun > underrun_cap_ms

    usable = sorted((r for r in rungs if r["usable"]), key=lambda r: r["concurrency"])
    failing = [r for r in usable if fails(r)]
    ceiling = failing[0]["concurrency"] if failing else None
    passing = [r for r in usable if ceiling is None or r["concurrency"] < ceiling]
    return (passing[-1] if passing else None), ceiling is not None


def figures(
    mode: str, artifact: dict[str, Any], slo_ms: float, underrun_cap_ms: float | None
) -> Figures:
    rung, bracketed = qmax_at(artifact["rungs"], slo_ms)
    capped, _ = qmax_at(artifact["rungs"], slo_ms, underrun_cap_ms)
    return Figures(
        mode=mode,
        slo_ms=slo_ms,
        q_max=None if rung is None else rung["concurrency"],
        bracketed=bracketed and rung is not None,
        throughput_rps=None if rung is None else rung["throughput_rps"],
        ttfab_p95_ms=None if rung is None else _p95(rung["ttfab_ms"]),
        underrun_p95_ms=None if rung is None else _p95(rung.get("underrun_ms")),
        q_max_no_more_underrun=None if capped is None else capped["concurrency"],
    )


def all_figures(artifacts: dict[str, dict[str, Any]], slos: list[float]) -> list[Figures]:
    """Per mode and SLO; the underrun cap is the same engine's fifo p95 underrun at its Q_max."""
    rows = []
    for slo in sorted(slos):
        caps: dict[str, float | None] = {}
        for mode, artifact in artifacts.items():
            if mode.endswith("-fifo"):
                fifo = figures(mode, artifact, slo, None)
                caps[mode.split("-")[0]] = fifo.underrun_p95_ms or 0.0
        for mode, artifact in artifacts.items():
            rows.append(figures(mode, artifact, slo, caps.get(mode.split("-")[0])))
    return rows


def tts_bench() -> list[str]:
    """``tts-bench`` beside this interpreter (a venv), else on PATH."""
    beside = Path(sys.executable).with_name("tts-bench")
    found = str(beside) if beside.is_file() else shutil.which("tts-bench")
    if found is None:
        raise SystemExit("capacity.py: tts-bench not found; pip install -e . first")
    return [found]


def run_qmax(
    out: Path, env: dict[str, str], timeout: float, label: str, *options: str
) -> dict[str, Any] | None:
    """``tts-bench qmax OPTIONS`` (1 s between rungs) writing into ``out``, its output in
    ``out/tts-bench.log``; the artifact, also after a timeout (what it measured), else None."""
    command = [*tts_bench(), "qmax", *options, "--gap-s", "1", "--artifacts-dir", str(out)]
    with open(out / "tts-bench.log", "w") as log:
        try:
            subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"   {label}stopped after {timeout:.0f} s; reading what it measured", flush=True)
    found = sorted(out.glob("qmax-*.json"))
    if not found:
        print(f"   {label}no artifact; see {out / 'tts-bench.log'}", flush=True)
        return None
    artifact: dict[str, Any] = json.loads(found[0].read_text())
    return artifact


def run_mode(mode: str, args: argparse.Namespace, deadline: float) -> dict[str, Any] | None:
    """One ``tts-bench qmax`` on the local endpoint in ``mode``; its artifact, or None."""
    out = args.out / mode
    out.mkdir(parents=True, exist_ok=True)
    engine = MODES[mode]["ENGINE"]
    env = {**os.environ, **MODES[mode], "PYTHONUNBUFFERED": "1"}
    if MODES[mode].get("WEIGHTS") != "untrained":  # the trained durations are for those alone
        env.pop("FORCE_DURATIONS", None)
    timeout = max(1.0, min(args.mode_timeout_s, deadline - time.monotonic()))
    print(f"== {mode}: {' '.join(f'{k}={v}' for k, v in MODES[mode].items())}", flush=True)
    ladder = args.synthetic_ladder if engine == "synthetic" else args.kokoro_ladder
    artifact = run_qmax(
        out,
        env,
        timeout,
        f"{mode}: ",
        *("--scenario", "kokoro-82m", "--ladder", ladder),
        *("--slo-ms", f"{max(args.report_slo_ms):g}"),
        *("--hold-s", f"{args.hold_s:g}", "--measure-s", f"{args.measure_s:g}"),
    )
    if artifact is None:
        return None
    for rung in artifact["rungs"]:
        p95 = rung["ttfab_ms"].get("p95")
        underrun = (rung.get("underrun_ms") or {}).get("p95")
        print(
            f"   N={rung['concurrency']:<3} usable={rung['usable']!s:<5} "
            f"p95 TTFAB {_num(p95, '.0f')} ms, {rung['throughput_rps']:.2f} rps, "
            f"p95 underrun {_num(underrun, '.0f')} ms",
            flush=True,
        )
    return artifact


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def table(rows: list[Figures]) -> list[str]:
    lines = [
        f"{'mode':<20} {'SLO ms':>7} {'Q_max':>6} {'rps@Q_max':>10} {'p95 TTFAB ms':>13} "
        f"{'p95 underrun ms':>16} {'Q_max, underrun <= fifo':>24}"
    ]
    for f in rows:
        q = "none" if f.q_max is None else f"{f.q_max}{'' if f.bracketed else '+'}"
        capped = "none" if f.q_max_no_more_underrun is None else str(f.q_max_no_more_underrun)
        lines.append(
            f"{f.mode:<20} {f.slo_ms:>7g} {q:>6} {_num(f.throughput_rps, '.2f'):>10} "
            f"{_num(f.ttfab_p95_ms, '.0f'):>13} {_num(f.underrun_p95_ms, '.1f'):>16} "
            f"{capped:>24}"
        )
    lines.append("Q_max N+ = lower bound (no usable rung above it failed)")
    return lines


def ratios(rows: list[Figures]) -> list[str]:
    """Each edf mode against fifo, same engine and SLO."""
    by = {(f.mode, f.slo_ms): f for f in rows}
    lines = []
    for (mode, slo), f in sorted(by.items()):
        engine = mode.split("-")[0]
        base = by.get((f"{engine}-fifo", slo))
        if mode.endswith("-fifo") or base is None or not base.q_max:
            continue
        plain = f.q_max / base.q_max if f.q_max else 0.0
        capped = (f.q_max_no_more_underrun or 0) / base.q_max
        lines.append(
            f"{mode} / {engine}-fifo at {slo:g} ms: Q_max x{plain:.2f} (p95 underrun "
            f"{_num(f.underrun_p95_ms, '.0f')} vs {_num(base.underrun_p95_ms, '.0f')} ms); "
            f"with p95 underrun no higher than fifo's: x{capped:.2f}"
        )
    return lines


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=DEFAULT_MODES, help=f"default: {DEFAULT_MODES}")
    parser.add_argument(
        "--report-slo-ms",
        type=lambda s: [float(v) for v in s.split(",")],
        default=[1000.0, 3000.0],
        help="Q_max at each of these p95 TTFAB objectives (default: 1000,3000)",
    )
    parser.add_argument("--synthetic-ladder", default=LADDERS["synthetic"])
    parser.add_argument("--kokoro-ladder", default=LADDERS["kokoro"])
    parser.add_argument("--hold-s", type=float, default=20.0, help="default: 20")
    parser.add_argument("--measure-s", type=float, default=14.0, help="default: 14")
    parser.add_argument("--mode-timeout-s", type=float, default=900.0, help="default: 900")
    parser.add_argument("--budget-s", type=float, default=3600.0, help="default: 3600")
    parser.add_argument("--out", type=Path, default=Path("reports/capacity"))
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing: the table from the artifacts already under --out",
    )
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        expected = ", ".join(MODES)
        parser.error(f"--modes: unknown {', '.join(unknown)}; expected some of {expected}")

    deadline = time.monotonic() + args.budget_s
    artifacts: dict[str, dict[str, Any]] = {}
    if not args.report_only:
        print(f"load average before: {load_average()}; {os.cpu_count()} CPUs", flush=True)
        if os.environ.get("FORCE_DURATIONS", "").strip():
            print(
                "untrained-* modes: weights untrained (development) with trained durations "
                f"(FORCE_DURATIONS={os.environ['FORCE_DURATIONS']})",
                flush=True,
            )
    for mode in modes:
        if args.report_only:
            found = sorted((args.out / mode).glob("qmax-*.json"))
            if found:
                artifacts[mode] = json.loads(found[0].read_text())
            continue
        if time.monotonic() > deadline:
            print(f"out of time before {mode}", flush=True)
            break
        artifact = run_mode(mode, args, deadline)
        if artifact is not None:
            artifacts[mode] = artifact
    if not args.report_only:
        print(f"load average after: {load_average()}", flush=True)
    rows = all_figures(artifacts, args.report_slo_ms)
    print("\n".join(table(rows) + ratios(rows)))
    if args.json:
        args.json.write_text(json.dumps([f.__dict__ for f in rows], indent=2))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
