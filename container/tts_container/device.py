"""On a GPU instance the model runs on the GPU, or the server never becomes ready.

SageMaker's real-time GPU instances boot an AMI whose NVIDIA driver may be older than the
image's CUDA needs. torch then sees no usable device and, with ``DEVICE=auto``, the server would
quietly serve on CPU at a fraction of the throughput the plan was measured at. Instead loading
fails: a ``TTS_DEVICE_UNUSABLE`` line says why, and ``/ping`` stays 503 with the reason, so the
endpoint never goes InService on the wrong device. ``DEVICE=cpu`` still serves on CPU knowingly.

A GPU is expected when the instance type (``INSTANCE_TYPE``, which speech-infra sets from the
variant's) is an accelerated one (``ml.g*``, ``ml.p*``), or NVIDIA device files are present.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from tts_container.logline import write_line

UNUSABLE_MARKER = "TTS_DEVICE_UNUSABLE "
GPU_INSTANCE_PREFIXES = ("ml.g", "ml.p")
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


class DeviceUnusable(RuntimeError):
    """A GPU is expected here but torch cannot use one."""


def gpu_expected(env: Mapping[str, str], dev: Path = Path("/dev")) -> str | None:
    """Why this machine should have a usable GPU, or None when nothing says so."""
    instance = env.get("INSTANCE_TYPE", "")
    if instance.startswith(GPU_INSTANCE_PREFIXES):
        return f"instance type {instance} is a GPU instance"
    if any(dev.glob("nvidia[0-9]*")):
        return f"NVIDIA device files are present in {dev}"
    return None


def driver_version(path: Path = DRIVER_VERSION_FILE) -> str | None:
    """The loaded NVIDIA kernel driver's version line, when there is one."""
    try:
        return path.read_text(encoding="utf-8").splitlines()[0].strip() or None
    except (OSError, IndexError):
        return None


def check_device(
    requested: str,
    *,
    env: Mapping[str, str] | None = None,
    dev: Path = Path("/dev"),
    cuda_available: Callable[[], bool] | None = None,
    driver: Callable[[], str | None] = driver_version,
) -> None:
    """Raise :class:`DeviceUnusable`, after the marker line, when a GPU is expected but unusable."""
    if requested == "cpu":
        return
    why = gpu_expected(os.environ if env is None else env, dev)
    if why is None:
        return
    import torch

    usable = torch.cuda.is_available() if cuda_available is None else cuda_available()
    if usable:
        return
    cuda = torch.version.cuda or "none (a CPU-only torch build)"
    reason = (
        f"{why}, but torch {torch.__version__} (CUDA {cuda}) finds no usable CUDA device "
        f"(NVIDIA driver: {driver() or 'not loaded'}); refusing to serve on CPU. Expected an "
        "AMI whose driver supports this CUDA (set the endpoint config's InferenceAmiVersion, "
        "as speech-infra does), or DEVICE=cpu to serve on CPU knowingly"
    )
    write_line(UNUSABLE_MARKER + json.dumps({"reason": reason, "requested": requested}))
    raise DeviceUnusable(reason)
