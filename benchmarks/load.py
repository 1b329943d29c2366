"""How accurate is `tts-bench load`, and does it keep to its schedule?

The calibration server runs in its own process with as many slots as streams (nothing queues)
and logs when it wrote each request's first audio byte; every process on the host shares
CLOCK_MONOTONIC, so for every request

    TTFAB error = the client's first-audio time - the server's write time.

1. TTFAB error at 256, 512 and 1024 closed-loop streams over 1 and 2 worker processes
   (`--processes P`: a master and P Locust workers), with the in-flight count each held.
2. Open loop: the achieved against the requested rate, constant and Poisson, over 2 workers, with
   the inter-arrival coefficient of variation and the sends that left late.

Goal: 512 streams over 2 processes with p99 error <= 10 ms; rates within 3%.
Run: .venv/bin/python benchmarks/load.py  (about 4 minutes; report `uptime` with the figures)
"""

from __future__ import annotations

import json
import multiprocessing as mp
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from client import SERVICE_S, serve  # benchmarks/client.py: the same server, the same shape

from pytest_tts_scaling.core.stats import time_weighted_in_flight

STREAM_DURATION_S = 10.0
# Requests that started in the first seconds share the start with every other connection.
SETTLE_S = 2.0
RATE_DURATION_S = 30.0


def run_load(port: int, args: list[str], records: Path) -> dict[str, Any]:
    summary = records.with_suffix(".summary.json")
    command = [sys.executable, "-m", "pytest_tts_scaling.cli", "load"]
    command += ["--endpoint-url", f"http://127.0.0.1:{port}", *args]
    command += ["--records", str(records), "--summary", str(summary)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tts-bench load failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(summary.read_text())
    return result


def with_server(slots: int, work: Any) -> tuple[Any, dict[str, int]]:
    parent, child = mp.Pipe()
    process = mp.Process(target=serve, args=(slots, child), daemon=True)
    process.start()
    port = parent.recv()
    try:
        out = work(port)
    finally:
        parent.send("done")
        sent = parent.recv()
        process.join(10)
    return out, sent


def streams(n: int, processes: int, folder: Path) -> dict[str, float]:
    records = folder / f"streams-{n}-{processes}.jsonl"
    args = ["--users", str(n), "--duration", str(STREAM_DURATION_S), "--processes", str(processes)]
    _, sent = with_server(n, lambda port: run_load(port, args, records))
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    first = min(r["epoch_start_ns"] for r in rows)
    window = [
        r
        for r in rows
        if r["status"] == "ok"
        and r["epoch_start_ns"] >= first + SETTLE_S * 1e9
        and r["request_id"] in sent
    ]
    errors = np.array([(r["start_ns"] + r["ttfab_ms"] * 1e6 - sent[r["request_id"]]) / 1e6
                       for r in window])  # fmt: skip
    # In flight over the same settled window: after the start's ramp, before the drain.
    last = max(r["epoch_start_ns"] for r in rows)
    intervals = [(r["epoch_start_ns"], r["epoch_start_ns"] + r["latency_ms"] * 1e6) for r in rows]
    held, _ = time_weighted_in_flight(intervals, first + SETTLE_S * 1e9, last)
    return {
        "streams": n,
        "processes": processes,
        "requests": len(window),
        "failed": sum(1 for r in rows if r["status"] != "ok"),
        "in_flight": held,
        "p50": float(np.percentile(errors, 50)),
        "p99": float(np.percentile(errors, 99)),
        "max": float(errors.max()),
    }


def rate(requested: float, arrival: str, folder: Path) -> dict[str, Any]:
    records = folder / f"rate-{requested:g}-{arrival}.jsonl"
    args = ["--rate", f"{requested:g}", "--arrival", arrival, "--duration", f"{RATE_DURATION_S:g}"]
    args += ["--processes", "2", "--seed", "7"]
    slots = int(requested * SERVICE_S * 3) + 16
    summary, _ = with_server(slots, lambda port: run_load(port, args, records))
    return summary


def main() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tts-load-bench-") as tmp:
        folder = Path(tmp)
        print(
            f"TTFAB error of tts-bench load (Locust) against the server's own first-byte times; "
            f"{SERVICE_S:g} s responses in 10 chunks, no queueing, {STREAM_DURATION_S:g} s each, "
            f"the first {SETTLE_S:g} s left out"
        )
        for processes in (1, 2):
            for n in (256, 512, 1024):
                row = streams(n, processes, folder)
                print(
                    f"  N={n:5d} over {processes} process(es): {row['requests']:6d} requests, "
                    f"{row['failed']} failed, in-flight {row['in_flight']:7.1f}; error p50 "
                    f"{row['p50']:6.2f} ms, p99 {row['p99']:6.2f} ms, max {row['max']:7.2f} ms",
                    flush=True,
                )
        print(f"open loop over 2 processes, {RATE_DURATION_S:g} s each:")
        for requested in (50.0, 200.0):
            for arrival in ("constant", "poisson"):
                s = rate(requested, arrival, folder)
                lag = s["send_lag_ms"] or {}
                cv = s["inter_arrival_cv"]
                print(
                    f"  {arrival:8s} {requested:5.0f} rps: scheduled {s['scheduled_rps']:7.2f}, "
                    f"achieved {s['achieved_rps']:7.2f} rps ({s['rate_error']:+.2%} of "
                    f"requested, {s['achieved_rps'] / s['scheduled_rps'] - 1:+.2%} of scheduled)"
                    f", CV {cv:.3f}; send lag p99 {lag.get('p99', float('nan')):.2f} ms, "
                    f"{s['late']} late, {s['unsent']} unsent",
                    flush=True,
                )
    print(f"benchmark took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
