"""How accurate and how strong is the load client, with the heap of a whole pytest run?

Runs the calibration server in a separate process (its clock is the same CLOCK_MONOTONIC) with as
many slots as streams, so nothing queues, and compares the client's first-audio timestamps with the
server's own send times:

- TTFAB error (client first-audio time minus server write time) at 1 and 256 concurrent streams,
  with the share of first audio the kernel stamped on arrival (plain HTTP on Linux; the rest is
  timed when the loop read it), the client's own event-loop lag and CPU share over the window;
- the most concurrent streams one client process sustains: in-flight within 5% of N, a p99
  TTFAB error under 50 ms, and the client keeping time (the engine's `client_saturated` bound).

"From the repository root": before measuring, pytest collects the whole repository in
this process (every test module, aws-cdk's jsii modules included), so the heap the measurement
runs beside is the one `pytest -m qmax` from the root has. `--heap none` skips that; `--no-quiet-gc`
measures without the engine's GC guard, to show what it removes.

Run: .venv/bin/python benchmarks/client.py [--heap pytest|none] [--no-quiet-gc] [--streams 1,256]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import multiprocessing as mp
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.core.stats import time_weighted_in_flight
from pytest_tts_scaling.load import engine as loadgen
from pytest_tts_scaling.load.engine import run_rung
from pytest_tts_scaling.load.monitor import client_lag_bound_ms
from pytest_tts_scaling.load.transports.http import HttpStreamTransport
from pytest_tts_scaling.load.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
SERVICE_S = 1.0
HOLD_S = 8.0
MEASURE_S = 5.0
SUSTAIN_ERROR_P99_MS = 50.0
# The SLO the client's lag is judged against: its bound (50 ms) is the error bound above.
SLO_MS = 1000.0


def serve(slots: int, conn: Any) -> None:
    with SerialStreamServer(service_s=SERVICE_S, first_audio_s=0.05, chunks=10, slots=slots) as srv:
        conn.send(srv.port)
        conn.recv()  # wait until the client is done
        conn.send(dict(srv.first_audio_sent_ns))


def collect_repository() -> dict[str, float]:
    """What `pytest` from the repository root leaves in the process: every module it imports."""
    import pytest

    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", str(ROOT)])
    took = time.monotonic() - started
    gc.collect()
    objects = len(gc.get_objects())
    pass_started = time.perf_counter()
    gc.collect()
    return {
        "collect_s": took,
        "objects": objects,
        "full_gc_ms": (time.perf_counter() - pass_started) * 1000,
    }


def measure(streams: int) -> dict[str, float]:
    spawn = mp.get_context("spawn")  # never fork a process holding jsii's node child and threads
    parent, child = spawn.Pipe()
    process = spawn.Process(target=serve, args=(streams, child), daemon=True)
    process.start()
    port = parent.recv()
    workload = Workload()

    async def go() -> Any:
        base = f"http://127.0.0.1:{port}"
        async with HttpStreamTransport(base) as transport:
            return await run_rung(
                transport,
                lambda w, s: workload.request(streams, w, s),
                concurrency=streams,
                hold_s=HOLD_S,
                measure_s=MEASURE_S,
            )

    result = asyncio.run(go())
    parent.send("done")
    sent = parent.recv()
    process.join(10)
    window = [r for r in result.in_window() if r.status == "ok" and r.ttfab_ms is not None]
    errors = [
        (r.start_ns + r.ttfab_ms * 1e6 - sent[r.request_id]) / 1e6
        for r in window
        if r.request_id in sent
    ]
    mean_in_flight, _ = time_weighted_in_flight(
        [(r.start_ns, r.end_ns) for r in result.records],
        result.window_start_ns,
        result.window_end_ns,
    )
    failed = sum(1 for r in result.records if r.status != "ok")
    client = result.client
    return {
        "streams": streams,
        "requests": len(window),
        "failed": failed,
        "in_flight": mean_in_flight,
        "err_p50": float(np.percentile(errors, 50)) if errors else float("nan"),
        "err_p99": float(np.percentile(errors, 99)) if errors else float("nan"),
        "err_max": float(np.max(errors)) if errors else float("nan"),
        "lag_p99": nan_if_none(client.lag_p99_ms),
        "lag_max": nan_if_none(client.lag_max_ms),
        "cpu": nan_if_none(client.cpu_share),
        "fa_lag": nan_if_none(client.first_audio_lag_p99_ms),
        "kernel_stamped": sum(r.first_audio_kernel_stamped for r in window) / max(1, len(window)),
        "gc_full": client.gc_full_collections,
        "gc_max": client.gc_max_ms or 0.0,
    }


def nan_if_none(value: float | None) -> float:
    return float("nan") if value is None else value


def show(row: dict[str, float]) -> None:
    read_lag = "" if np.isnan(row["fa_lag"]) else f" (at first audio {row['fa_lag']:.2f} ms)"
    print(
        f"  N={int(row['streams']):5d}: {int(row['requests']):6d} requests, {int(row['failed'])} "
        f"failed, in-flight {row['in_flight']:8.1f}, TTFAB error p50 {row['err_p50']:6.2f} ms, "
        f"p99 {row['err_p99']:6.2f} ms, max {row['err_max']:7.2f} ms, "
        f"{row['kernel_stamped'] * 100:3.0f}% stamped by the kernel; client loop lag p99 "
        f"{row['lag_p99']:6.2f} ms{read_lag}, max "
        f"{row['lag_max']:7.2f} ms, CPU {row['cpu'] * 100:3.0f}%; "
        f"full GC passes {int(row['gc_full'])}, longest GC pause {row['gc_max']:5.1f} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heap", choices=("pytest", "none"), default="pytest")
    parser.add_argument("--no-quiet-gc", action="store_true", help="measure without the GC guard")
    parser.add_argument("--streams", default="1,256", help="accuracy rows (default 1,256)")
    parser.add_argument("--no-sustain", action="store_true", help="skip the 512..2048 search")
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.no_quiet_gc:
        loadgen.quiet_gc = contextlib.nullcontext  # type: ignore[assignment]
    started = time.monotonic()
    if args.heap == "pytest":
        heap = collect_repository()
        print(
            f"heap of a whole pytest collection of {ROOT.name}: {heap['objects']:,.0f} objects "
            f"(collected in {heap['collect_s']:.0f} s); one full GC pass takes "
            f"{heap['full_gc_ms']:.0f} ms"
        )
    guard = "off (--no-quiet-gc)" if args.no_quiet_gc else "on (freeze + no full GC in rungs)"
    print(
        f"client accuracy: server streams {SERVICE_S:g} s responses in 10 chunks, no queueing; "
        f"GC guard {guard}; load average {os.getloadavg()[0]:.2f} at start"
    )
    for streams in (int(n) for n in args.streams.split(",")):
        show(measure(streams))
    if not args.no_sustain:
        bound = client_lag_bound_ms(SLO_MS)
        print(
            "most concurrent streams one client process sustains (in-flight within 5% of N, "
            f"TTFAB error p99 < {SUSTAIN_ERROR_P99_MS:g} ms, loop lag p99 <= {bound:g} ms):"
        )
        sustained = 0
        for streams in (512, 1024, 2048):
            row = measure(streams)
            show(row)
            ok = (
                row["in_flight"] >= 0.95 * streams
                and row["err_p99"] < SUSTAIN_ERROR_P99_MS
                and row["lag_p99"] <= bound
            )
            if not ok:
                break
            sustained = streams
        print(f"sustained: {sustained or '< 512'} streams")
    took = time.monotonic() - started
    print(f"benchmark took {took:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
