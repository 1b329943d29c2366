"""A GPU instance without a usable CUDA device fails its health check instead of serving on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from container_fake_server import free_port, stop_process
from tts_container.device import UNUSABLE_MARKER, DeviceUnusable, check_device, gpu_expected

G5 = {"INSTANCE_TYPE": "ml.g5.xlarge"}


def test_gpu_instance_types_and_nvidia_devices_expect_a_gpu(tmp_path: Path) -> None:
    assert gpu_expected(G5, tmp_path) == "instance type ml.g5.xlarge is a GPU instance"
    assert gpu_expected({"INSTANCE_TYPE": "ml.p4d.24xlarge"}, tmp_path) is not None
    assert gpu_expected({"INSTANCE_TYPE": "ml.c7i.xlarge"}, tmp_path) is None
    assert gpu_expected({}, tmp_path) is None
    (tmp_path / "nvidia0").write_text("")
    assert gpu_expected({}, tmp_path) == f"NVIDIA device files are present in {tmp_path}"


def test_no_usable_device_on_a_gpu_instance_fails_with_the_marker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(DeviceUnusable, match="refusing to serve on CPU"):
        check_device(
            "auto",
            env=G5,
            dev=tmp_path,
            cuda_available=lambda: False,
            driver=lambda: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02",
        )
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(UNUSABLE_MARKER)
    body = json.loads(line[len(UNUSABLE_MARKER) :])
    assert body["requested"] == "auto"
    assert "ml.g5.xlarge" in body["reason"]
    assert "470.256.02" in body["reason"]
    assert "InferenceAmiVersion" in body["reason"]


@pytest.mark.parametrize(
    ("requested", "env", "usable"),
    [("cpu", G5, False), ("auto", {}, False), ("auto", G5, True), ("cuda", G5, True)],
    ids=["cpu-asked-for", "no-gpu-expected", "gpu-usable", "cuda-usable"],
)
def test_otherwise_nothing_is_refused(
    tmp_path: Path, requested: str, env: dict[str, str], usable: bool
) -> None:
    check_device(requested, env=env, dev=tmp_path, cuda_available=lambda: usable)


def test_the_server_never_becomes_ready_on_cpu_when_the_instance_is_a_gpu_one(
    dev_model_cache: Path, tmp_path: Path
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a usable GPU: the refusal cannot be shown here")
    executable = Path(sys.executable).with_name("tts-serve")
    port = free_port()
    env = {
        **os.environ,
        "TTS_CACHE_DIR": str(dev_model_cache),
        "WEIGHTS": "untrained",
        "DEVICE": "auto",
        "INSTANCE_TYPE": "ml.g5.xlarge",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("MODEL_DIR", None)
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [str(executable), "--port", str(port), "--host", "127.0.0.1"],
            stdout=stdout,
            stderr=stderr,
            env=env,
        )
    statuses: list[int] = []
    try:
        deadline = time.monotonic() + 120
        # Until the load has failed: /ping answers 503 with the reason, or the server exits.
        while time.monotonic() < deadline and process.poll() is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/ping", timeout=2)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            statuses.append(answer.status_code)
            if "refusing to serve on CPU" in answer.json().get("detail", ""):
                break
            time.sleep(0.2)
        logs = out.read_text() + err.read_text()
        assert statuses, logs
        assert set(statuses) == {503}, (statuses, logs)
        assert UNUSABLE_MARKER in logs, logs
        assert '"marker": "ready"' not in logs
        assert process.poll() in (None, 1), logs  # still refusing, or exited with status 1
    finally:
        stop_process(process)
