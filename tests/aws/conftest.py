"""AWS test fixtures: one moto server (server mode, 127.0.0.1) per session and a clean AWS env.

`.ci/run` may start the server itself and pass its URL in TTS_MOTO_URL; otherwise the session
starts `moto_server` from this venv on a free port. Under pytest-xdist each worker starts its own
server: two workers on one account would see each other's endpoints, alarms and scaling targets
(some tests deploy the fixed name speech-kokoro-82m). Tests never reach AWS: the environment
points boto3 at moto and holds fake credentials, and no profile or config file is read.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_tts_scaling.aws.clients import AwsClients
from tests.aws.aws_helpers import USER_AWS_VARIABLES, FakeClock, moto_environment
from tests.aws.eventstream_server import EventStreamServer, event_stream_server

MOTO_SERVER = Path(sys.executable).with_name("moto_server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_up(url: str, process: subprocess.Popen[bytes] | None, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/moto-api/", timeout=2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"moto server at {url} did not answer within {timeout_s:g} s")


@pytest.fixture(scope="session")
def moto_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = os.environ.get("TTS_MOTO_URL")
    if given and not os.environ.get("PYTEST_XDIST_WORKER"):
        _wait_up(given.rstrip("/"), None)
        yield given.rstrip("/")
        return
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto_server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=sink, stderr=sink
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def aws_env(
    moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Point boto3's standard chain at moto; returns the full environment for subprocesses."""
    empty = tmp_path_factory.mktemp("aws-config") / "config"
    empty.write_text("")
    for name in USER_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in moto_environment(moto_url, str(empty)).items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


@pytest.fixture
def runtime(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[EventStreamServer]:
    """InvokeEndpointWithResponseStream to the event-stream stand-in (here and in subprocesses
    started after it), every other call to moto."""
    with event_stream_server() as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", server.url)
        yield server


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def clients(aws_env: dict[str, str], fake_clock: FakeClock) -> AwsClients:
    return AwsClients(clock=fake_clock.clock())
