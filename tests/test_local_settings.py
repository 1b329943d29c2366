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
