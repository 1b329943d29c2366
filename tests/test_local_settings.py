"""The local endpoint records the container settings it starts the server with."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.endpoints.base import LocalEndpoint
from pytest_tts_scaling.endpoints.local import RECORDED_SETTINGS, LocalServer


def test_engine_and_scheduler_from_the_environment_reach_the_artifact_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGINE", "synthetic")
    monkeypatch.setenv("SCHEDULER", "edf")
    monkeypatch.setenv("BATCH_MAX", " ")  # blank: not set
    monkeypatch.setenv("HOME_TOWN", "not a container setting")
    server = LocalServer(env={"SCHEDULER": "fifo", "QUEUE_MAX_DEPTH": "8"})
    assert server.env == {"ENGINE": "synthetic", "SCHEDULER": "fifo", "QUEUE_MAX_DEPTH": "8"}
    endpoint = LocalEndpoint(server.base_url, model_dir=None, container_env=server.env)
    assert endpoint.deployed.container_env["ENGINE"] == "synthetic"


def test_without_those_variables_nothing_is_added(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in RECORDED_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert LocalServer().env == {}


def test_forced_durations_reach_the_artifact_and_the_missed_segments_are_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With FORCE_DURATIONS the artifact's config records the file, and on stop the local endpoint
    prints the server's forced and missed counts and names (a few of) the missed segments."""
    import httpx

    monkeypatch.setenv("WEIGHTS", "untrained")
    monkeypatch.setenv("FORCE_DURATIONS", "/data/trained-durations.json")
    said: list[str] = []
    server = LocalServer(log=said.append)
    assert server.env["FORCE_DURATIONS"] == "/data/trained-durations.json"
    missed = [
        f"WARNING forced durations: segment not in d.json (not recorded), ...: phonemes 'a{i}'"
        for i in range(7)
    ]
    server.lines = [(0.0, "INFO ready"), *((0.0, line) for line in missed)]
    headers = {"X-TTS-Durations-Forced": "120", "X-TTS-Durations-Missed": "7"}
    monkeypatch.setattr(httpx, "get", lambda url, timeout: httpx.Response(200, headers=headers))
    server._report_forced_durations()
    assert said[0].startswith("tts-scaling: trained durations forced for 120 segments; 7 segments")
    assert said[1:6] == [f"tts-scaling: {line}" for line in missed[:5]]
    assert said[6] == "tts-scaling: ... and 2 more"

    said.clear()
    monkeypatch.setattr(httpx, "get", lambda url, timeout: httpx.Response(200))
    server._report_forced_durations()  # a server without forced durations: nothing said
    assert said == []


def test_without_forced_durations_stopping_asks_the_server_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx

    monkeypatch.delenv("FORCE_DURATIONS", raising=False)
    said: list[str] = []
    server = LocalServer(log=said.append)

    def no_request(url: str, timeout: float) -> httpx.Response:
        raise AssertionError(f"asked {url} without FORCE_DURATIONS")

    monkeypatch.setattr(httpx, "get", no_request)
    server._report_forced_durations()
    assert said == []
