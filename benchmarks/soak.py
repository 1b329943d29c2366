"""Soak the serving container at 10x its admission bound, on both paths, with disconnects mixed in.

Starts ``tts-serve`` (QUEUE_MAX_DEPTH=4 by default, the development model unless ``--engine`` says
otherwise) and drives two phases of ``--seconds`` each: chunked HTTP, then WebSocket sessions, each
with 10 x the bound of concurrent clients. A client that gets ``queue_saturated`` pauses
``--retry-pause-s`` and tries again. About a third of the requests are abandoned: closed at once,
closed while queued, closed after the first audio chunk, or reset (RST) mid-body; WebSocket
sessions are closed or aborted mid-stream the same way.

A separate process pings ``/ping`` every 50 ms on a kept-alive connection and reads the server's own
in-flight count from its headers. Printed: answers by status and path, p99 time to a 503 (error
frame on the WebSocket), the most in flight the server saw against its bound, /ping p99 and max,
the server's RSS before and after, in flight once the load stopped (must reach 0) and a final valid
request on each path. Last, SIGTERM with as many streams in flight as the bound (one of them on
the WebSocket): how they end and how long the process takes to exit 0. Exit status 1 if a target
is missed.

Run: ``python benchmarks/soak.py [--seconds 60] [--engine synthetic] [--queue-max-depth 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import http.client
import json
import multiprocessing
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import httpx
import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "container" / "tests"))
from container_fake_server import free_port, wait_until_ready

TEXTS = (
    "A short reply.",
    "Streaming speech should start early, well before the end.",
    "Overload is answered at once, and every slot comes back.",
)
WS_PATH = "/invocations-bidirectional-stream"
ENDINGS = ("full", "close_at_once", "close_while_queued", "close_after_first_chunk", "reset")
WEIGHTS = (66, 8, 8, 9, 9)
REQUEST_TIMEOUT_S = 120.0
PING_EVERY_S = 0.05
PING_P99_TARGET_MS = 50.0


@dataclass
class Phase:
    name: str
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    reject_s: list[float] = field(default_factory=list)
    non_503_errors: list[str] = field(default_factory=list)

    def record(self, outcome: str) -> None:
        self.outcomes[outcome] += 1


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def http_request(host: str, port: int, phase: Phase, ending: str, pause_s: float) -> None:
    """One POST /invocations on its own connection, ended the way ``ending`` says."""
    body = json.dumps({"text": random.choice(TEXTS)}).encode()
    conn = h11.Connection(h11.CLIENT)
    head = h11.Request(
        method="POST",
        target="/invocations",
        headers=[
            ("host", f"{host}:{port}"),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
        ],
    )
    reader, writer = await asyncio.open_connection(host, port)
    began = time.perf_counter()
    try:
        writer.write(
            conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        )
        if ending == "close_at_once":
            phase.record("abandoned: closed at once")
            return
        status, error, chunks = None, None, 0
        wait_s = random.uniform(0.05, 0.5) if ending == "close_while_queued" else None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await asyncio.wait_for(reader.read(65536), wait_s or REQUEST_TIMEOUT_S)
                except TimeoutError:
                    if wait_s is not None:  # no answer yet: the request is queued; leave
                        phase.record("abandoned: closed while queued")
                        return
                    raise
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                if status == 503:
                    phase.reject_s.append(time.perf_counter() - began)
                wait_s = None
            elif isinstance(event, h11.Data):
                if status == 200:
                    chunks += 1
                    if chunks == 1 and ending in ("close_after_first_chunk", "reset"):
                        if ending == "reset":
                            _reset(writer)
                        phase.record(f"200 abandoned: {ending}")
                        return
                else:
                    error = (error or b"") + bytes(event.data)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        if status == 200:
            phase.record("200 complete")
            return
        code = json.loads(error or b"{}").get("error")
        phase.record(f"{status} {code}")
        if status == 503 and code == "queue_saturated":
            await asyncio.sleep(pause_s)
        else:
            phase.non_503_errors.append(f"{status} {code}")
    except (ConnectionError, h11.RemoteProtocolError, TimeoutError) as exc:
        phase.record(f"client saw {type(exc).__name__}")
        phase.non_503_errors.append(f"connection: {exc!r}")
    finally:
        if not writer.transport.is_closing():
            writer.close()


async def ws_session(url: str, phase: Phase, deadline: float, pause_s: float) -> None:
    """One session with requests one after another until the deadline or an abandonment."""
    async with connect(url, open_timeout=30, close_timeout=2) as ws:
        while time.perf_counter() < deadline:
            ending = random.choices(ENDINGS, WEIGHTS)[0]
            began = time.perf_counter()
            await ws.send(json.dumps({"text": random.choice(TEXTS)}))
            if ending == "close_at_once":
                phase.record("abandoned: closed at once")
                return
            audio = 0
            while True:
                message = await asyncio.wait_for(ws.recv(), REQUEST_TIMEOUT_S)
                if isinstance(message, bytes):
                    audio += len(message)
                    if ending in ("close_after_first_chunk", "reset"):
                        if ending == "reset":
                            ws.transport.abort()
                        phase.record(f"ok abandoned: {ending}")
                        return
                    continue
                frame = json.loads(message)
                kind = frame["type"]
                if kind == "synthesis_start" and ending == "close_while_queued":
                    phase.record("abandoned: closed while queued")
                    return
                if kind == "error":
                    code = frame["error"]
                    phase.record(f"error {code}")
                    if code == "queue_saturated":
                        phase.reject_s.append(time.perf_counter() - began)
                        await asyncio.sleep(pause_s)
                    else:
                        phase.non_503_errors.append(f"ws error {code}")
                    break
                if kind == "synthesis_complete":
                    phase.record("ok complete" if frame["audio_bytes"] == audio else "ok short")
                    break


async def run_phase(
    name: str, url: str, clients: int, seconds: float, pause_s: float
) -> tuple[Phase, float]:
    phase = Phase(name)
    host, port = url.removeprefix("http://").split(":")
    deadline = time.perf_counter() + seconds

    async def http_client() -> None:
        while time.perf_counter() < deadline:
            ending = random.choices(ENDINGS, WEIGHTS)[0]
            await http_request(host, int(port), phase, ending, pause_s)

    async def ws_client() -> None:
        ws_url = url.replace("http", "ws", 1) + WS_PATH
        while time.perf_counter() < deadline:
            try:
                await ws_session(ws_url, phase, deadline, pause_s)
            except (ConnectionClosed, OSError, TimeoutError) as exc:
                phase.record(f"client saw {type(exc).__name__}")
                phase.non_503_errors.append(f"ws connection: {exc!r}")

    worker = http_client if name == "http" else ws_client
    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return phase, time.perf_counter() - began


def pinger(url: str, stop: Any, out: Any) -> None:
    """Own process: /ping every 50 ms on one kept-alive connection; latencies and in-flight."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    latencies, statuses, max_in_flight = [], collections.Counter(), 0
    while not stop.is_set():
        began = time.perf_counter()
        conn.request("GET", "/ping")
        response = conn.getresponse()
        response.read()
        latencies.append(time.perf_counter() - began)
        statuses[response.status] += 1
        max_in_flight = max(max_in_flight, int(response.getheader("x-in-flight", "0")))
        time.sleep(PING_EVERY_S)
    out.put((latencies, dict(statuses), max_in_flight))


def ping_headers(url: str) -> httpx.Headers:
    return httpx.get(url + "/ping", timeout=5).headers


def final_requests(url: str) -> list[str]:
    """A valid request on each path after the load."""
    results = []
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        response = client.post(url + "/invocations", json={"text": "The load is over."})
        results.append(f"http {response.status_code}, {len(response.content)} audio bytes")
    from websockets.sync.client import connect as sync_connect

    with sync_connect(url.replace("http", "ws", 1) + WS_PATH, open_timeout=30) as ws:
        ws.send(json.dumps({"text": "The load is over."}))
        audio, last = 0, {}
        while True:
            message = ws.recv(timeout=REQUEST_TIMEOUT_S)
            if isinstance(message, bytes):
                audio += len(message)
                continue
            last = json.loads(message)
            if last["type"] in ("synthesis_complete", "error"):
                break
        results.append(f"ws {last['type']}, {audio} audio bytes")
    return results


def sigterm_with_streams(url: str, process: subprocess.Popen[bytes], streams: int) -> str:
    """SIGTERM once ``streams`` streams (all HTTP but one WebSocket) are in flight; how it ends."""
    endings: list[str] = []
    text = "The server is told to stop while this answer streams; it should still arrive whole."

    def http_stream() -> None:
        try:
            with (
                httpx.Client(timeout=REQUEST_TIMEOUT_S) as client,
                client.stream("POST", url + "/invocations", json={"text": text}) as response,
            ):
                size = sum(len(chunk) for chunk in response.iter_raw())
            endings.append(f"http {response.status_code} complete ({size} bytes)")
        except httpx.HTTPError as exc:
            endings.append(f"http cut ({type(exc).__name__})")

    def ws_stream() -> None:
        from websockets.sync.client import connect as sync_connect

        with sync_connect(url.replace("http", "ws", 1) + WS_PATH, open_timeout=30) as ws:
            ws.send(json.dumps({"text": text}))
            last: dict[str, Any] = {}
            try:
                while last.get("type") not in ("synthesis_complete", "error"):
                    message = ws.recv(timeout=REQUEST_TIMEOUT_S)
                    if isinstance(message, str):
                        last = json.loads(message)
                ws.recv(timeout=REQUEST_TIMEOUT_S)
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else None
                endings.append(f"ws {last.get('type')} {last.get('error', '')}, close {code}")

    threads = [threading.Thread(target=http_stream) for _ in range(streams - 1)]
    threads.append(threading.Thread(target=ws_stream))
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while ping_headers(url)["x-in-flight"] != str(streams) and time.monotonic() < deadline:
        time.sleep(0.01)
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    status = process.wait(timeout=60)
    stopped_s = time.monotonic() - signalled
    for thread in threads:
        thread.join(timeout=REQUEST_TIMEOUT_S)
    return (
        f"exit status {status} {stopped_s:.1f} s after SIGTERM with {streams} streams in flight: "
        + "; ".join(sorted(endings))
    )


def start_server(args: argparse.Namespace, port: int, logs: Path) -> subprocess.Popen[bytes]:
    executable = Path(sys.executable).with_name("tts-serve")
    command = [str(executable), "--port", str(port), "--log-level", "warning"]
    if args.engine:
        command += ["--engine", args.engine]
    env = {
        **os.environ,
        "QUEUE_MAX_DEPTH": str(args.queue_max_depth),
        "INFERENCE_WORKERS": "1",
        "DEVICE": "cpu",
        "PYTHONUNBUFFERED": "1",
    }
    with open(logs / "stdout.log", "wb") as out, open(logs / "stderr.log", "wb") as err:
        return subprocess.Popen(command, stdout=out, stderr=err, env=env)


def server_records(stdout_log: Path) -> list[dict[str, Any]]:
    """The server's own per-request metrics lines (EMF)."""
    lines = stdout_log.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith('{"_aws"')]


def print_server_view(records: list[dict[str, Any]]) -> None:
    """Outcomes by transport as the server counted them, and its own time to queue_saturated."""
    outcomes = collections.Counter((r["transport"], r["status"]) for r in records)
    for transport in sorted({t for t, _ in outcomes}):
        counts = ", ".join(f"{s} {c}" for (t, s), c in sorted(outcomes.items()) if t == transport)
        print(f"server's own outcomes ({transport}): {counts}")
        times = [
            r["Latency"]
            for r in records
            if r["transport"] == transport and r.get("error") == "queue_saturated"
        ]
        if times:
            print(
                f"server's own time to queue_saturated ({transport}): n={len(times)} "
                f"p50 {np.median(times):.2f} ms, p99 {np.percentile(times, 99):.2f} ms"
            )


def p99_ms(values: list[float]) -> float:
    return 1000 * float(np.percentile(values, 99)) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="per phase (default 60)")
    parser.add_argument("--queue-max-depth", type=int, default=4, help="the bound (default 4)")
    parser.add_argument("--overload", type=int, default=10, help="clients per slot (default 10)")
    parser.add_argument(
        "--retry-pause-s", type=float, default=0.1, help="after a 503 (default 0.1)"
    )
    parser.add_argument("--engine", default=None, help="tts-serve --engine (default: its own)")
    parser.add_argument("--start-timeout-s", type=float, default=600.0)
    args = parser.parse_args()
    bound = args.queue_max_depth
    clients = args.overload * bound
    logs = Path(tempfile.mkdtemp(prefix="soak-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_server(args, port, logs)
    failures: list[str] = []
    try:
        wait_until_ready(url, lambda: process.poll() is None, args.start_timeout_s, str(logs))
        time.sleep(1.0)
        rss_before = rss_mib(process.pid)
        print(f"server pid {process.pid}, logs in {logs}; bound {bound}, {clients} clients/phase")
        stop = multiprocessing.Event()
        out: multiprocessing.Queue = multiprocessing.Queue()
        ping_process = multiprocessing.Process(target=pinger, args=(url, stop, out), daemon=True)
        ping_process.start()
        phases = []
        for name in ("http", "ws"):
            phase, took = asyncio.run(
                run_phase(name, url, clients, args.seconds, args.retry_pause_s)
            )
            phases.append(phase)
            print(f"\n{name}: {sum(phase.outcomes.values())} requests in {took:.1f} s")
            for outcome, count in sorted(phase.outcomes.items()):
                print(f"  {outcome}: {count}")
            print(
                f"  time to a 503: n={len(phase.reject_s)} p50 "
                f"{1000 * float(np.median(phase.reject_s or [np.nan])):.1f} ms, "
                f"p99 {p99_ms(phase.reject_s):.1f} ms"
            )
            print(f"  non-503 errors: {len(phase.non_503_errors)} {phase.non_503_errors[:5]}")
            print(f"  server RSS after the phase: {rss_mib(process.pid):.0f} MiB")
            if phase.non_503_errors:
                failures.append(f"{name}: {len(phase.non_503_errors)} non-503 errors")
        stop.set()
        latencies, ping_statuses, polled_max = out.get(timeout=30)
        ping_process.join(timeout=10)

        deadline = time.monotonic() + 30
        while (headers := ping_headers(url))["x-in-flight"] != "0" and time.monotonic() < deadline:
            time.sleep(0.1)
        in_flight_after = int(headers["x-in-flight"])
        peak = int(headers["x-in-flight-peak"])
        time.sleep(1.0)
        rss_after = rss_mib(process.pid)
        finals = final_requests(url)
        ping_p99 = p99_ms(latencies)
        print(
            f"\n/ping under load: n={len(latencies)} statuses {ping_statuses} "
            f"p50 {1000 * float(np.median(latencies)):.1f} ms, p99 {ping_p99:.1f} ms, "
            f"max {1000 * max(latencies):.1f} ms"
        )
        print_server_view(server_records(logs / "stdout.log"))
        print(f"in flight: server's peak {peak} (bound {bound}); most seen by /ping {polled_max}")
        print(f"in flight after the load: {in_flight_after}")
        print(f"server RSS: before {rss_before:.0f} MiB, after {rss_after:.0f} MiB")
        print(f"final requests: {'; '.join(finals)}")
        print(f"load average {os.getloadavg()}")
        if peak > bound:
            failures.append(f"in flight reached {peak} > bound {bound}")
        if in_flight_after != 0:
            failures.append(f"{in_flight_after} slots leaked")
        if ping_p99 > PING_P99_TARGET_MS:
            failures.append(f"/ping p99 {ping_p99:.1f} ms > {PING_P99_TARGET_MS:.0f} ms")
        if set(ping_statuses) != {200}:
            failures.append(f"/ping answered {ping_statuses}")
        if not (finals[0].startswith("http 200") and finals[1].startswith("ws synthesis_complete")):
            failures.append(f"final requests: {finals}")
        shutdown = sigterm_with_streams(url, process, bound)
        print(f"shutdown: {shutdown}")
        if not shutdown.startswith("exit status 0"):
            failures.append(f"shutdown: {shutdown}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=60)
    print("targets: " + ("all met" if not failures else "MISSED: " + "; ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
