"""The local default endpoint: the container's own server (`tts-serve`) as a child process.

It is the same app the SageMaker image runs, on the trained Kokoro-82M from the model packages
unless a model directory (or WEIGHTS=untrained) is given. Its output is kept with arrival times,
so the scale-out timeline can read the container's log markers.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

import httpx

from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.load.host import CoreSplit, usable_cores

# Converting the trained model (or building the development model) the first time takes a while
# on 2 cores; later starts reuse it.
READY_TIMEOUT_S = 600.0
# The container's log line naming a segment its FORCE_DURATIONS file lacked; a few are repeated.
MISSED_SEGMENT_LOG = "forced durations: segment not in"
MISSED_SEGMENTS_SHOWN = 5
# The container's settings that change what is measured (which engine, which scheduler): the
# server inherits them from this environment, so the artifact's container_env records them.
RECORDED_SETTINGS = (
    "ENGINE",
    "WEIGHTS",
    "FORCE_DURATIONS",
    "SCHEDULER",
    "BATCH_MAX",
    "BATCH_WAIT_MS",
    "BATCH_WINDOW_MS",
    "DEADLINE_MARGIN_MS",
    "MAX_WAIT_MS",
    "SYNTHETIC_BATCH_BASE_MS",
    "SYNTHETIC_SEGMENT_MS",
    "SYNTHETIC_SEGMENT_AUDIO_S",
    "FAULT_GARBLE_BATCHES",
)
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_command() -> list[str]:
    """`tts-serve` beside this interpreter (a venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "tts-serve"
    found = str(beside) if beside.exists() else shutil.which("tts-serve")
    if found is None:
        raise InputError(
            "the local default endpoint needs the container's server: tts-serve was not found; "
            "expected the [local] extra (pip install 'pytest-tts-scaling[local]', in a checkout "
            "pip install -e ./container), or pass --endpoint / --endpoint-url"
        )
    return [found]


class LocalServer:
    """Start `tts-serve` on a free 127.0.0.1 port, wait for /ping, stop it on exit."""

    def __init__(
        self,
        *,
        log: Callable[[str], None] = print,
        model_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        log_path: Path | None = None,
    ):
        self.log = log
        self.model_dir = model_dir
        inherited = {k: os.environ[k] for k in RECORDED_SETTINGS if os.environ.get(k, "").strip()}
        self.env = {**inherited, **(env or {})}
        self.ready_timeout_s = ready_timeout_s
        self.log_path = log_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[tuple[float, str]] = []
        self.cores = CoreSplit.for_cores(usable_cores())
        self._reader: threading.Thread | None = None
        # The server's X-TTS-Weights once ready: which weights the artifact's numbers belong to.
        self.weights: str | None = None

    def start(self) -> LocalServer:
        command = [
            *self.cores.server_prefix(),
            *serve_command(),
            *("--host", "127.0.0.1", "--port", str(self.port)),
        ]
        if self.model_dir is not None:
            command += ["--model-dir", str(self.model_dir)]
        self.process = subprocess.Popen(
            command,
            env={
                # One worker on the server's threads, beside the client; a setting given wins.
                "INFERENCE_WORKERS": "1",
                "OMP_NUM_THREADS": str(self.cores.server_threads),
                **os.environ,
                **self.env,
                "PYTHONUNBUFFERED": "1",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        return self

    def _read_output(self) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        sink = self.log_path.open("a", encoding="utf-8") if self.log_path else None
        try:
            for line in self.process.stdout:
                self.lines.append((time.time(), line.rstrip("\n")))
                if sink is not None:
                    sink.write(line)
                    sink.flush()
        finally:
            if sink is not None:
                sink.close()

    def wait_ready(self) -> float:
        """Poll /ping until 200; returns the wall-clock time it first answered 200."""
        assert self.process is not None
        deadline = time.monotonic() + self.ready_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    tail = "\n".join(line for _, line in self.lines[-15:])
                    raise RuntimeError(
                        f"tts-serve exited with code {self.process.returncode} before it was "
                        f"ready; last output:\n{tail}"
                    )
                try:
                    ping = client.get(f"{self.base_url}/ping")
                    if ping.status_code == 200:
                        self.weights = ping.headers.get("x-tts-weights")
                        return time.time()
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise TimeoutError(
            f"tts-serve on {self.base_url} not ready after {self.ready_timeout_s:g} s"
        )

    def stop(self) -> None:
        """SIGTERM (as on scale-in), SIGKILL after a grace period; then close the output pipe."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self._report_forced_durations()
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_TIMEOUT_S)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def _report_forced_durations(self) -> None:
        """With FORCE_DURATIONS, how many segments ran on the trained durations and how many
        the file lacked (the server's log names each of those). Without it, nothing to ask."""
        if "FORCE_DURATIONS" not in self.env:
            return
        try:
            headers = httpx.get(f"{self.base_url}/ping", timeout=2.0).headers
        except httpx.HTTPError:
            return
        missed = headers.get("x-tts-durations-missed")
        if missed is not None:
            self.log(
                f"tts-scaling: trained durations forced for "
                f"{headers.get('x-tts-durations-forced')} segments; {missed} segments not in "
                "the FORCE_DURATIONS file ran on the untrained model's own durations"
            )
            named = [line for _, line in self.lines if MISSED_SEGMENT_LOG in line]
            for line in named[:MISSED_SEGMENTS_SHOWN]:
                self.log(f"tts-scaling: {line}")
            if len(named) > MISSED_SEGMENTS_SHOWN:
                self.log(f"tts-scaling: ... and {len(named) - MISSED_SEGMENTS_SHOWN} more")

    def __enter__(self) -> LocalServer:
        self.log(
            f"tts-scaling: starting the local endpoint (tts-serve on {self.base_url}); "
            "the first start converts the trained Kokoro-82M once (about 20 s)"
        )
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        self.log(
            f"tts-scaling: local endpoint ready on {self.base_url} "
            f"(weights: {self.weights or 'not reported'})"
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
