"""Facts about the machine a local measurement ran on, and how its cores are shared.

A local run measures the server and the client on one host, so the host is part of the result:
its hardware goes into the slug (runs on different machines never compare silently) and its
load into the artifact (a busy host explains a noisy curve).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# With at least this many usable cores the local server and the client get cores of their own.
MIN_CORES_TO_SPLIT = 4


@cache
def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, else what the platform module says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@cache
def gpu_name() -> str | None:
    """The first NVIDIA GPU's name, asked of nvidia-smi (no torch import); None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return names[0] if out.returncode == 0 and names else None


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity), in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def hardware_label() -> str:
    """What the slug hashes: the GPU where there is one, else the CPU model and core count."""
    gpu = gpu_name()
    return f"gpu:{gpu}" if gpu else f"cpu:{cpu_model()} x{len(usable_cores())}"


def load_average() -> float | None:
    """The 1-minute load average, where the platform has one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True)
class CoreSplit:
    """Which cores the local server and the client use; shared when there are too few to split."""

    server: tuple[int, ...]
    client: tuple[int, ...]

    @property
    def shared(self) -> bool:
        return bool(set(self.server) & set(self.client))

    @classmethod
    def for_cores(cls, cores: list[int]) -> CoreSplit:
        """Half the cores (rounded up) to the server, the rest to the client, where enough."""
        if len(cores) < MIN_CORES_TO_SPLIT:
            return cls(server=tuple(cores), client=tuple(cores))
        half = (len(cores) + 1) // 2
        return cls(server=tuple(cores[:half]), client=tuple(cores[half:]))

    @property
    def server_threads(self) -> int:
        """Inference threads for the server: one core is left to the client when they share.

        On 2 shared cores, two torch threads beside the client (or any other busy process) wait
        on each other; one thread halved the first-audio time with a CPU burner on one core.
        """
        return max(1, len(self.server) - (1 if self.shared else 0))

    def server_prefix(self) -> list[str]:
        """A `taskset` prefix starting the server on its cores; empty when shared or unavailable."""
        taskset = shutil.which("taskset")
        if self.shared or taskset is None:
            return []
        return [taskset, "-c", ",".join(map(str, self.server))]

    @contextlib.contextmanager
    def client_pinned(self) -> Iterator[None]:
        """Keep this process (the client) off the server's cores while inside, where they are
        split; the affinity it had comes back on exit (one pytest process opens endpoints one
        after another, and its other tests run on every core)."""
        if self.shared or not hasattr(os, "sched_setaffinity"):
            yield
            return
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.client)
        try:
            yield
        finally:
            os.sched_setaffinity(0, before)
