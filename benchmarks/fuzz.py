"""Fuzz the serving container with 10,000+ hostile inputs and count the answers by class and status.

The inputs are the Hypothesis strategies of container/tests/container_fuzzing.py: HTTP requests
(JSON shapes, types, Unicode with lone surrogates, huge numbers, deep nesting, sizes, headers,
content types), raw bytes on a socket (protocol garbage, broken chunked bodies, bad framing) and
WebSocket frames, all on one kept-alive HTTP connection and one WebSocket session. Every answer is
checked: no 5xx, every refusal in the contract's JSON error shape (docs/container.md#refusals), no
dropped connection for a well-formed request, the session goes on. A valid request must still be
served at the end.

By default the script starts the real server code around the fake engine (the property is about
the HTTP and WebSocket layer; the model would only slow it down); ``--url`` fuzzes a server that
already runs, ``tts-serve`` for instance. Exit status 1 on any violation.

Run: ``python benchmarks/fuzz.py [--inputs 12000] [--url http://127.0.0.1:8080]``.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

TESTS = Path(__file__).resolve().parent.parent / "container" / "tests"
sys.path.insert(0, str(TESTS))

from container_fake_server import free_port, stop_process, wait_until_ready  # noqa: E402
from container_fuzzing import (  # noqa: E402
    HttpProbe,
    RawProbe,
    Violation,
    WsProbe,
    check_http,
    check_raw,
    check_still_serving,
    check_ws,
    http_probes,
    raw_probes,
    ws_probes,
)
from websockets.sync.client import ClientConnection, connect  # noqa: E402

SHARES = {"http": 0.6, "ws": 0.3, "raw": 0.1}
START_TIMEOUT_S = 60.0


def _start_fake_server(queue_max_depth: int) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    env = {**os.environ, "QUEUE_MAX_DEPTH": str(queue_max_depth), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, str(TESTS / "container_fake_server.py"), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return f"http://127.0.0.1:{port}", process


class Tally:
    def __init__(self) -> None:
        self.outcomes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.violations: list[str] = []

    def run(self, path: str, kind: str, check: object) -> None:
        try:
            outcome = check()  # type: ignore[operator]
        except Violation as exc:
            outcome = "VIOLATION"
            self.violations.append(f"{path}/{kind}: {exc}")
        except Exception as exc:  # the client itself failed: count it, it is not the server's
            outcome = f"client error {type(exc).__name__}"
        self.outcomes[(path, kind, str(outcome))] += 1

    def print(self) -> None:
        by_class: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        by_status: collections.Counter[str] = collections.Counter()
        for (path, kind, outcome), count in self.outcomes.items():
            by_class[(path, kind)][outcome] += count
            by_status[outcome.split(" ", 1)[0] if outcome[:1].isdigit() else outcome] += count
        total = sum(self.outcomes.values())
        print(f"\n{total} inputs\n\nby class (path/kind: count, outcomes):")
        for (path, kind), outcomes in sorted(by_class.items()):
            top = ", ".join(f"{o} x{c}" for o, c in outcomes.most_common(6))
            more = f", +{len(outcomes) - 6} more" if len(outcomes) > 6 else ""
            print(f"  {path}/{kind}: {sum(outcomes.values())}  [{top}{more}]")
        print("\nby status:")
        for status, count in sorted(by_status.items()):
            print(f"  {status}: {count}")
        fives = sum(c for (_, _, o), c in self.outcomes.items() if o[:1] == "5" and o[:3].isdigit())
        print(f"\n5xx: {fives}; violations: {len(self.violations)}")
        for violation in self.violations[:20]:
            print(f"  {violation}")


def fuzz(url: str, inputs: int, tally: Tally) -> None:
    counts = {path: max(1, round(inputs * share)) for path, share in SHARES.items()}
    port = urlsplit(url).port or 80
    fuzz_settings = settings(
        max_examples=1,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    with httpx.Client(base_url=url, timeout=30) as client:

        @settings(fuzz_settings, max_examples=counts["http"])
        @given(st.data())
        def http(data: st.DataObject) -> None:
            probe: HttpProbe = data.draw(http_probes)
            tally.run("http", probe.kind, lambda: check_http(client, probe))

        ws_url = url.replace("http", "ws", 1) + "/invocations-bidirectional-stream"
        with connect(ws_url, open_timeout=10, max_size=None) as session:

            @settings(fuzz_settings, max_examples=counts["ws"])
            @given(st.data())
            def ws(data: st.DataObject) -> None:
                probe: WsProbe = data.draw(ws_probes)
                tally.run("ws", probe.kind, lambda: check_ws(session, probe))

            @settings(fuzz_settings, max_examples=counts["raw"])
            @given(st.data())
            def raw(data: st.DataObject) -> None:
                probe: RawProbe = data.draw(raw_probes)
                tally.run("raw", probe.kind, lambda: check_raw(port, probe))

            for name, run in (("http", http), ("ws", ws), ("raw", raw)):
                began = time.perf_counter()
                run()
                print(f"{name}: {counts[name]} inputs in {time.perf_counter() - began:.1f} s")
            _session_still_open(session, tally)
        tally.run("final", "valid_request", lambda: check_still_serving(client) or "200")


def _session_still_open(session: ClientConnection, tally: Tally) -> None:
    frame = WsProbe("final", '{"text": "Still here."}')
    tally.run("final", "ws_valid_request", lambda: check_ws(session, frame))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=12_000, help="inputs in all (default 12000)")
    parser.add_argument("--url", default=None, help="fuzz this running server (default: start one)")
    parser.add_argument("--queue-max-depth", type=int, default=4, help="of the started server")
    args = parser.parse_args()
    process = None
    url = args.url
    if url is None:
        url, process = _start_fake_server(args.queue_max_depth)
    try:
        alive = (lambda: True) if process is None else (lambda: process.poll() is None)
        wait_until_ready(url, alive, START_TIMEOUT_S)
        tally = Tally()
        began = time.perf_counter()
        fuzz(url, args.inputs, tally)
        tally.print()
        print(f"wall time {time.perf_counter() - began:.1f} s; load average {os.getloadavg()}")
    finally:
        if process is not None:
            stop_process(process)
    return 1 if tally.violations else 0


if __name__ == "__main__":
    sys.exit(main())
