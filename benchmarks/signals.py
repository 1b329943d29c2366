"""What a stopped qmax run leaves on the endpoint: SIGTERM, SIGINT, SIGHUP and SIGKILL mid-rung.

Each case deploys a fresh endpoint on moto (2 instances, scaling 1..4 with a target-tracking and a
scale-in step policy), runs `tts-bench qmax --endpoint NAME` against it with the SageMaker runtime
answered by the local event-stream stand-in (tests/aws/eventstream_server.py: audio after 50 ms,
then a second chunk), waits until the first rung is done and the second one under way, sends the
signal and reads back the endpoint's state: exit status, suspension flags, desired instance count,
capacity limits, the freeze lock's tags and the snapshot file. After SIGKILL nothing can restore,
so the plain `tts-bench thaw --endpoint NAME` (from another directory) is run and the state read
again. Prints a Markdown table.

Run: .venv/bin/python benchmarks/signals.py  (TTS_MOTO_URL reuses a running moto server)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "aws"))

if TYPE_CHECKING:
    from eventstream_server import EventStreamServer

BIN = Path(sys.executable).parent
PCM = b"\x01\x00" * 2400  # 0.1 s at 24 kHz
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL)
QMAX_ARGS = ("--ladder", "1,2,4", "--hold-s", "12", "--measure-s", "6", "--gap-s", "0")
SLO_AND_DIR = ("--slo-ms", "5000", "--artifacts-dir")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto() -> tuple[str, subprocess.Popen[bytes] | None]:
    given = os.environ.get("TTS_MOTO_URL")
    if given:
        return given.rstrip("/"), None
    port = free_port()
    process = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/moto-api/", timeout=2):
                return url, process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("moto_server did not start within 30 s")


@dataclass
class State:
    exit_status: str
    suspended: str
    desired: int
    limits: str
    locks: int
    snapshot: bool
    said: str

    def row(self, case: str) -> str:
        return (
            f"| {case} | {self.exit_status} | {self.suspended} | {self.desired} | {self.limits} "
            f"| {self.locks} | {'yes' if self.snapshot else 'no'} | {self.said} |"
        )


def endpoint_state(endpoint: str, artifacts: Path, exit_status: str, said: str) -> State:
    from aws_helpers import desired_count, lock_keys, suspended, target_state

    flags = suspended(f"endpoint/{endpoint}/variant/AllTraffic")
    target = target_state(f"endpoint/{endpoint}/variant/AllTraffic") or {}
    on = [
        name.replace("DynamicScaling", "").replace("Scaling", "").replace("Suspended", "")
        for name, v in flags.items()
        if v
    ]
    return State(
        exit_status=exit_status,
        suspended=", ".join(on) or "none",
        desired=desired_count(endpoint),
        limits=f"{target.get('MinCapacity')}..{target.get('MaxCapacity')}",
        locks=len([k for k in lock_keys(endpoint) if k.startswith("tts-bench:lock:")]),
        snapshot=(artifacts / f".freeze-{endpoint}.json").exists(),
        said=said.replace("|", "/")[:110],
    )


def run_case(sig: signal.Signals, env: dict[str, str], server: EventStreamServer) -> list[str]:
    from aws_helpers import deploy, unique
    from eventstream_server import Script, payload_part

    d = deploy(unique("signals"), instances=2)
    server.scripts[d.endpoint] = Script([(0.05, payload_part(PCM)), (0.1, payload_part(PCM))])
    work = Path(tempfile.mkdtemp(prefix="signals-"))
    artifacts = work / "reports"
    out, err = work / "stdout.log", work / "stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        child = subprocess.Popen(
            [
                str(BIN / "tts-bench"),
                "qmax",
                "--endpoint",
                d.endpoint,
                *QMAX_ARGS,
                *SLO_AND_DIR,
                str(artifacts),
            ],
            stdout=stdout,
            stderr=stderr,
            env=env,
            cwd=work,
        )
    deadline = time.monotonic() + 180
    while "qmax N=1 " not in out.read_text():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            raise SystemExit(f"qmax never finished rung 1:\n{out.read_text()}\n{err.read_text()}")
        time.sleep(0.1)
    frozen = endpoint_state(d.endpoint, artifacts, "running", "rung 2 under way")
    time.sleep(3.0)  # well inside rung 2's 12 s hold
    child.send_signal(sig)
    try:
        code = child.wait(timeout=180)
    except subprocess.TimeoutExpired:
        child.kill()
        code = child.wait()
    status = f"{code}" if code >= 0 else f"killed ({signal.Signals(-code).name})"
    last = (err.read_text().strip().splitlines() or ["(nothing on stderr)"])[-1]
    rows = [
        frozen.row(f"{sig.name}: before the signal"),
        endpoint_state(d.endpoint, artifacts, status, last).row(f"{sig.name}: after"),
    ]
    if sig == signal.SIGKILL:
        thaw = subprocess.run(
            [str(BIN / "tts-bench"), "thaw", "--endpoint", d.endpoint],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tempfile.mkdtemp(prefix="elsewhere-"),
        )
        said = next((line for line in thaw.stdout.splitlines() if line.startswith("restoring")), "")
        rows.append(
            endpoint_state(d.endpoint, artifacts, str(thaw.returncode), said).row(
                "SIGKILL, then plain `tts-bench thaw --endpoint NAME`"
            )
        )
    return rows


def main() -> int:
    from aws_helpers import USER_AWS_VARIABLES, moto_environment
    from eventstream_server import event_stream_server

    moto, process = start_moto()
    empty = Path(tempfile.mkdtemp(prefix="aws-config-")) / "config"
    empty.write_text("")
    os.environ.update(moto_environment(moto, str(empty)))
    for name in USER_AWS_VARIABLES:
        os.environ.pop(name, None)
    try:
        with event_stream_server() as server:
            env = {
                **os.environ,
                "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": server.url,
                "PYTHONUNBUFFERED": "1",
            }
            print(
                "| case | exit status | suspended | desired | min..max | locks | snapshot | "
                "last line |"
            )
            print("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for sig in SIGNALS:
                for row in run_case(sig, env, server):
                    print(row, flush=True)
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
