"""The real server (uvicorn set-up, protocols, SIGTERM drain) around the fake engine, as a process.

``python container_fake_server.py --port PORT [--segments N] [--delay-s S]``; the environment gives
QUEUE_MAX_DEPTH and SHUTDOWN_DRAIN_S as for ``tts-serve``. For tests of what only a real process
and socket show (signals, the drain, the protocols), without the model's cost.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from container_fakes import FakeEngine
from tts_container.app import create_app
from tts_container.server import serve
from tts_container.settings import Settings


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace_s``: a server a test or a
    benchmark started never outlives it."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace_s)


def wait_until_ready(url: str, alive: Callable[[], bool], timeout_s: float, logs: str = "") -> None:
    """Until ``url`` answers /ping 200; fails if the server dies or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert alive(), f"the server died before it was ready\n{logs}"
        assert time.monotonic() < deadline, f"no /ping 200 from {url} in {timeout_s} s\n{logs}"
        try:
            if httpx.get(url + "/ping", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--segments", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2400)
    parser.add_argument("--delay-s", type=float, default=0.0)
    args = parser.parse_args()
    logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
    engine = FakeEngine(segments=1, samples=args.samples)  # a quick warm-up
    settings = Settings.from_env(
        {"INFERENCE_WORKERS": "1", **os.environ},  # one worker unless the test names more
        cache_dir=Path(tempfile.gettempdir()) / "tts-fake-cache",
    )
    app = create_app(settings, engine_factory=lambda _settings: engine)

    def shape_requests_once_warm() -> None:
        if app.state.tts.ready_event.wait(60):
            engine.segments, engine.delay_s = args.segments, args.delay_s

    threading.Thread(target=shape_requests_once_warm, daemon=True).start()
    return serve(app, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    sys.exit(main())
