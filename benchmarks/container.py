"""Benchmark of the serving container: starts ``tts-serve`` itself and measures it over sockets.

Prints, for the local machine:

- time to first audio byte and total time per text length (short, medium, long), concurrency 1;
- ``/ping`` latency (p50, p99, max) while 4 long requests run at once;
- the time to answer ``503 queue_saturated`` (p50, p99) under 10x overload of the admission bound;
- with ``--hang-up``, only this instead: a short text's time to first audio and in all when the
  server is idle, and just after a client hung up on a long answer (closed its connection after
  ``--after-audio-s`` of audio).

Run: ``python benchmarks/container.py [--model-dir DIR] [--reps 3] [--queue-max-depth 4]
[--hang-up [--after-audio-s 1.0]]``.
Every wait is bounded; the whole run stops after ``--budget-s`` seconds (default 900).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

TEXTS = {
    "short": "Hello, and welcome back.",
    "medium": (
        "Streaming speech should start early, well before the whole answer is ready. "
        "The first segment is short on purpose, so the listener hears something at once."
    ),
    "long": (
        "Autoscaling a latency-bound endpoint starts from two measured numbers. The first is the "
        "highest concurrency one instance holds while the time to first audio stays within the "
        "objective. The second is how long it takes from asking for one more instance until that "
        "instance serves healthy traffic. From these two, the thresholds, the cooldowns and the "
        "size of the fleet follow, and none of them has to be guessed any more."
    ),
}
REQUEST_TIMEOUT_S = 180.0
PCM_BYTES_PER_S = 48000  # the container's raw audio: 24 kHz, 16-bit mono
# After each hang-up, the server is given this long to finish what it kept computing.
SETTLE_S = 8.0


class OutOfTime(RuntimeError):
    pass


@dataclass
class Timing:
    status: int
    first_audio_s: float | None
    total_s: float
    audio_bytes: int


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def synthesize(url: str, text: str) -> Timing:
    """One POST /invocations, streamed; times from just before sending."""
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        began = time.perf_counter()
        first = None
        size = 0
        with client.stream("POST", url + "/invocations", json={"text": text}) as response:
            for chunk in response.iter_bytes():
                if chunk and first is None and response.status_code == 200:
                    first = time.perf_counter() - began
                size += len(chunk)
        return Timing(response.status_code, first, time.perf_counter() - began, size)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def server_command() -> list[str]:
    """``tts-serve`` beside this interpreter, else ``python -m tts_container`` (the same main)."""
    executable = Path(sys.executable).with_name("tts-serve")
    return [str(executable)] if executable.is_file() else [sys.executable, "-m", "tts_container"]


def start_server(args: argparse.Namespace, port: int, log_dir: Path) -> subprocess.Popen[bytes]:
    command = [*server_command(), "--port", str(port), "--host", "127.0.0.1"]
    if args.model_dir:
        command += ["--model-dir", str(args.model_dir)]
    env = {
        **os.environ,
        "QUEUE_MAX_DEPTH": str(args.queue_max_depth),
        "INFERENCE_WORKERS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    with open(log_dir / "stdout.log", "wb") as out, open(log_dir / "stderr.log", "wb") as err:
        return subprocess.Popen(command, stdout=out, stderr=err, env=env)


def wait_ready(url: str, process: subprocess.Popen[bytes], deadline: float) -> float:
    began = time.perf_counter()
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"tts-serve exited with status {process.returncode}")
        if time.monotonic() > deadline:
            raise OutOfTime("the server did not become ready in time")
        try:
            if httpx.get(url + "/ping", timeout=2).status_code == 200:
                return time.perf_counter() - began
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def bench_lengths(url: str, reps: int, deadline: float) -> list[str]:
    lines = [
        f"{'text':<8} {'words':>5} {'audio_s':>8} {'ttfa_ms p50':>12} {'ttfa_ms max':>12} "
        f"{'total_ms p50':>13} {'total_ms max':>13}"
    ]
    synthesize(url, "Warm the connection path up.")
    for name, text in TEXTS.items():
        runs = []
        for _ in range(reps):
            if time.monotonic() > deadline:
                raise OutOfTime("out of time in the text-length benchmark")
            timing = synthesize(url, text)
            assert timing.status == 200, timing
            runs.append(timing)
        ttfa = [1000 * t.first_audio_s for t in runs if t.first_audio_s is not None]
        total = [1000 * t.total_s for t in runs]
        audio_s = runs[0].audio_bytes / 48000
        lines.append(
            f"{name:<8} {len(text.split()):>5} {audio_s:>8.2f} {statistics.median(ttfa):>12.0f} "
            f"{max(ttfa):>12.0f} {statistics.median(total):>13.0f} {max(total):>13.0f}"
        )
    return lines


def hang_up(url: str, text: str, after_audio_s: float) -> None:
    """POST `text` and close the connection once `after_audio_s` of audio has arrived."""
    with (
        httpx.Client(timeout=REQUEST_TIMEOUT_S) as client,
        client.stream("POST", url + "/invocations", json={"text": text}) as response,
    ):
        heard = 0
        for chunk in response.iter_bytes():
            heard += len(chunk)
            if heard >= after_audio_s * PCM_BYTES_PER_S:
                return  # leaving both blocks closes the connection mid-answer


def bench_hang_up(url: str, reps: int, after_audio_s: float, deadline: float) -> list[str]:
    """The short text idle, and right after a hang-up on the long one."""
    synthesize(url, "Warm the connection path up.")
    rows: dict[str, list[Timing]] = {"idle": [], "after a hang-up": []}
    for _ in range(reps):
        if time.monotonic() > deadline:
            raise OutOfTime("out of time in the hang-up benchmark")
        rows["idle"].append(synthesize(url, TEXTS["short"]))
        hang_up(url, TEXTS["long"], after_audio_s)
        rows["after a hang-up"].append(synthesize(url, TEXTS["short"]))
        time.sleep(SETTLE_S)
    lines = [
        f"short text ({len(TEXTS['short'].split())} words) after {after_audio_s:g} s of the long "
        f"one ({len(TEXTS['long'].split())} words), {reps} reps: first audio p50 / max, in all "
        "p50 / max"
    ]
    for name, runs in rows.items():
        assert all(t.status == 200 for t in runs), runs
        first = [1000 * t.first_audio_s for t in runs if t.first_audio_s is not None]
        total = [1000 * t.total_s for t in runs]
        lines.append(
            f"  {name:<21} {statistics.median(first):6.0f} / {max(first):6.0f} ms, "
            f"{statistics.median(total):6.0f} / {max(total):6.0f} ms"
        )
    return lines


def bench_ping_under_load(url: str, deadline: float) -> list[str]:
    done = threading.Event()
    pings: list[float] = []
    statuses: list[int] = []

    def long_request() -> None:
        statuses.append(synthesize(url, TEXTS["long"]).status)

    def pinger() -> None:
        with httpx.Client(timeout=5) as client:
            while not done.is_set() and time.monotonic() < deadline:
                began = time.perf_counter()
                client.get(url + "/ping").raise_for_status()
                pings.append(time.perf_counter() - began)
                time.sleep(0.02)

    workers = [threading.Thread(target=long_request) for _ in range(4)]
    ping_thread = threading.Thread(target=pinger)
    ping_thread.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=max(1.0, deadline - time.monotonic()))
    done.set()
    ping_thread.join(timeout=10)
    ms = [1000 * p for p in pings]
    return [
        f"/ping while 4 long requests run (statuses {sorted(statuses)}): n={len(ms)} "
        f"p50={percentile(ms, 50):.1f} ms p99={percentile(ms, 99):.1f} ms max={max(ms):.1f} ms"
    ]


def _overload_request(url: str, barrier: threading.Barrier, results: list[Timing]) -> None:
    barrier.wait(timeout=60)
    results.append(synthesize(url, TEXTS["short"]))


def bench_overload(url: str, bound: int, deadline: float, waves: int = 3) -> list[str]:
    concurrency = 10 * bound
    rejected_ms: list[float] = []
    accepted = 0
    for _ in range(waves):
        if time.monotonic() > deadline:
            raise OutOfTime("out of time in the overload benchmark")
        barrier = threading.Barrier(concurrency)
        results: list[Timing] = []
        threads = [
            threading.Thread(target=_overload_request, args=(url, barrier, results))
            for _ in range(concurrency)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(1.0, deadline - time.monotonic()))
        rejected_ms += [1000 * r.total_s for r in results if r.status == 503]
        accepted += sum(1 for r in results if r.status == 200)
        others = [r.status for r in results if r.status not in (200, 503)]
        assert not others, f"unexpected statuses under overload: {others}"
    return [
        f"503 under 10x overload ({concurrency} concurrent, QUEUE_MAX_DEPTH={bound}, "
        f"{waves} waves): 200s={accepted} 503s={len(rejected_ms)} "
        f"p50={percentile(rejected_ms, 50):.1f} ms p99={percentile(rejected_ms, 99):.1f} ms "
        f"max={max(rejected_ms, default=float('nan')):.1f} ms"
    ]


def server_side(log_dir: Path) -> list[str]:
    """What the server's own metrics lines say about the same run."""
    records = []
    for line in (log_dir / "stdout.log").read_text().splitlines():
        if line.startswith('{"_aws"'):
            records.append(json.loads(line))
    rejected = [r["Latency"] for r in records if r["status"] == "rejected"]
    ok = [r for r in records if r["status"] == "ok"]
    first = [r["FirstChunkLatency"] for r in ok]
    waits = [r["QueueWait"] for r in ok]
    markers = [
        line for line in (log_dir / "stdout.log").read_text().splitlines() if "TTS_MARKER" in line
    ]
    device = [line for line in (log_dir / "stderr.log").read_text().splitlines() if " on c" in line]
    return [
        f"server side: {len(ok)} ok, FirstChunkLatency p50={percentile(first, 50):.1f} ms "
        f"p99={percentile(first, 99):.1f} ms, QueueWait p99={percentile(waits, 99):.1f} ms; "
        f"{len(rejected)} rejected, 503 handling p99={percentile(rejected, 99):.3f} ms",
        *(line.split("INFO ", 1)[-1] for line in device[:1]),
        *markers,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=None, help="default: the dev model")
    parser.add_argument("--reps", type=int, default=3, help="requests per text length (default: 3)")
    parser.add_argument(
        "--queue-max-depth", type=int, default=4, help="admission bound (default: 4)"
    )
    parser.add_argument(
        "--budget-s", type=float, default=900.0, help="whole-run limit (default: 900)"
    )
    parser.add_argument(
        "--hang-up", action="store_true", help="only the hang-up rows (see the module's help)"
    )
    parser.add_argument(
        "--after-audio-s", type=float, default=1.0, help="--hang-up: audio heard (default: 1.0)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the lines here as JSON")
    parser.add_argument(
        "--log-dir", type=Path, default=None, help="keep the server's logs here (default: discard)"
    )
    args = parser.parse_args(argv)

    deadline = time.monotonic() + args.budget_s
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="tts-bench-") as scratch:
        log_dir = args.log_dir or Path(scratch)
        log_dir.mkdir(parents=True, exist_ok=True)
        process = start_server(args, port, log_dir)
        lines: list[str] = []
        try:
            ready_s = wait_ready(url, process, deadline)
            lines.append(
                f"server ready (/ping 200) {ready_s:.1f} s after spawn; {os.cpu_count()} CPUs"
            )
            if args.hang_up:
                lines += bench_hang_up(url, args.reps, args.after_audio_s, deadline)
            else:
                lines += bench_lengths(url, args.reps, deadline)
                lines += bench_ping_under_load(url, deadline)
                lines += bench_overload(url, args.queue_max_depth, deadline)
        except (OutOfTime, RuntimeError, AssertionError) as exc:
            lines.append(f"stopped: {exc}")
            print("\n".join(lines))
            print((log_dir / "stderr.log").read_text()[-3000:], file=sys.stderr)
            return 1
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
        lines += server_side(log_dir)
        print("\n".join(lines))
        if args.json:
            args.json.write_text(json.dumps(lines, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
