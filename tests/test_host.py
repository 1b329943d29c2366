"""Host facts: the hardware in the local slug, the core split, and --model-dir."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from pytest_tts_scaling.endpoints import base as endpoint
from pytest_tts_scaling.load import host
from pytest_tts_scaling.load.host import CoreSplit
from pytest_tts_scaling.option_table import model_dir


def test_too_few_cores_are_shared() -> None:
    split = CoreSplit.for_cores([0, 1])
    assert split.shared
    assert split.server_prefix() == []


def test_enough_cores_are_split_between_server_and_client() -> None:
    split = CoreSplit.for_cores([0, 1, 2, 3, 4])
    assert split.server == (0, 1, 2)
    assert split.client == (3, 4)
    assert not split.shared


def test_split_server_starts_under_taskset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert CoreSplit.for_cores([0, 1, 2, 3]).server_prefix() == ["/usr/bin/taskset", "-c", "0,1"]


def test_another_machine_gets_another_local_slug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint, "hardware_label", lambda: "cpu:Some CPU x2")
    cpu = endpoint.local_fingerprint(None)
    monkeypatch.setattr(endpoint, "hardware_label", lambda: "gpu:NVIDIA H200")
    gpu = endpoint.local_fingerprint(None)
    assert cpu != gpu


def test_hardware_label_names_cpu_and_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "gpu_name", lambda: None)
    monkeypatch.setattr(host, "cpu_model", lambda: "Test CPU")
    monkeypatch.setattr(host, "usable_cores", lambda: [0, 1])
    assert host.hardware_label() == "cpu:Test CPU x2"


def test_local_endpoint_records_the_host() -> None:
    local = endpoint.LocalEndpoint(
        "http://127.0.0.1:1", model_dir=None, container_env={}, cores=CoreSplit.for_cores([0, 1])
    )
    facts = local.host()
    assert facts.cpu_count >= 1
    assert facts.cores_shared
    assert facts.server_cores == [0, 1]


def test_model_dir_must_be_a_directory(tmp_path: Path) -> None:
    assert model_dir(str(tmp_path)) == tmp_path
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected a directory holding"):
        model_dir(str(tmp_path / "missing"))


def test_real_weights_are_not_called_the_development_model(tmp_path: Path) -> None:
    untrained = endpoint.LocalEndpoint(
        "http://127.0.0.1:1", model_dir=None, container_env={}, weights="untrained (development)"
    )
    trained = endpoint.LocalEndpoint(
        "http://127.0.0.1:1",
        model_dir=None,
        container_env={},
        weights="trained (int8-derived v1.0)",
    )
    real = endpoint.LocalEndpoint("http://127.0.0.1:1", model_dir=tmp_path, container_env={})
    assert untrained.deployed.development_model
    assert not trained.deployed.development_model
    assert trained.deployed.weights == "trained (int8-derived v1.0)"
    assert not real.deployed.development_model
    assert real.deployed.container_env["MODEL_DIR"] == str(tmp_path)


def test_an_older_artifact_without_weights_keeps_its_reading() -> None:
    """Before the weights were recorded, a local endpoint without a model dir was untrained."""
    old = endpoint.LocalEndpoint("http://127.0.0.1:1", model_dir=None, container_env={})
    assert old.deployed.weights is None
    assert old.deployed.development_model


def test_a_shared_host_leaves_the_client_a_core() -> None:
    assert CoreSplit.for_cores([0, 1]).server_threads == 1
    assert CoreSplit.for_cores([0]).server_threads == 1
    assert CoreSplit.for_cores([0, 1, 2, 3]).server_threads == 2


def test_the_client_is_pinned_only_while_inside_and_its_affinity_comes_back() -> None:
    if not hasattr(os, "sched_setaffinity") or len(host.usable_cores()) < 2:
        pytest.skip("needs two cores this process may run on")
    before = os.sched_getaffinity(0)
    first, *rest = sorted(before)
    split = CoreSplit(server=(first,), client=tuple(rest))
    with split.client_pinned():
        assert os.sched_getaffinity(0) == set(rest)
    assert os.sched_getaffinity(0) == before
    with pytest.raises(RuntimeError), split.client_pinned():
        raise RuntimeError("the endpoint failed")
    assert os.sched_getaffinity(0) == before


def test_a_shared_split_pins_nothing() -> None:
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with CoreSplit.for_cores([0, 1]).client_pinned():
        if before is not None:
            assert os.sched_getaffinity(0) == before
