"""How accurate and how strong is the load client?

Runs the calibration server in a separate process (its clock is the same CLOCK_MONOTONIC) with as
many slots as streams, so nothing queues, and compares the client's first-audio timestamps with the
server's own send times:

- TTFAB error (client first-audio time minus server write time) at 1 and 256 concurrent streams;
- the most concurrent streams one client process sustains: in-flight within 5% of N and a p99
  TTFAB error under 50 ms.

Run: .venv/bin/python benchmarks/client.py
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import resource
import time
from typing import Any

import numpy as np

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.loadgen import run_rung
from pytest_tts_scaling.stats import time_weighted_in_flight
from pytest_tts_scaling.transports.http import HttpStreamTransport
from pytest_tts_scaling.workload import Workload

SERVICE_S = 1.0
HOLD_S = 8.0
MEASURE_S = 5.0
SUSTAIN_ERROR_P99_MS = 50.0


def serve(slots: int, conn: Any) -> None:
    with SerialStreamServer(service_s=SERVICE_S, first_audio_s=0.05, chunks=10, slots=slots) as srv:
        conn.send(srv.port)
        conn.recv()  # wait until the client is done
        conn.send(dict(srv.first_audio_sent_ns))


def measure(streams: int) -> dict[str, float]:
    parent, child = mp.Pipe()
    process = mp.Process(target=serve, args=(streams, child), daemon=True)
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
    return {
        "streams": streams,
        "requests": len(window),
        "failed": failed,
        "in_flight": mean_in_flight,
        "err_p50": float(np.percentile(errors, 50)) if errors else float("nan"),
        "err_p99": float(np.percentile(errors, 99)) if errors else float("nan"),
        "err_max": float(np.max(errors)) if errors else float("nan"),
    }


def show(row: dict[str, float]) -> None:
    print(
        f"  N={int(row['streams']):5d}: {int(row['requests']):6d} requests, {int(row['failed'])} "
        f"failed, in-flight {row['in_flight']:8.1f}, TTFAB error p50 {row['err_p50']:6.2f} ms, "
        f"p99 {row['err_p99']:6.2f} ms, max {row['err_max']:7.2f} ms"
    )


def main() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.monotonic()
    print(f"client accuracy: server streams {SERVICE_S:g} s responses in 10 chunks, no queueing")
    for streams in (1, 256):
        show(measure(streams))
    print(
        "most concurrent streams one client process sustains "
        f"(in-flight within 5% of N, TTFAB error p99 < {SUSTAIN_ERROR_P99_MS:g} ms):"
    )
    sustained = 0
    for streams in (512, 1024, 2048):
        row = measure(streams)
        show(row)
        ok = row["in_flight"] >= 0.95 * streams and row["err_p99"] < SUSTAIN_ERROR_P99_MS
        if not ok:
            break
        sustained = streams
    took = time.monotonic() - started
    print(f"sustained: {sustained or '< 512'} streams; benchmark took {took:.0f} s")


if __name__ == "__main__":
    main()
