"""How many inference workers a CPU serves with, and how its cores are shared among their forwards.

On a CPU, one forward on every core is a fast first segment but poor throughput: Kokoro's
convolutions scale badly across threads, so two forwards on one core each complete more audio
per second than one on two. The container therefore runs one inference worker per core by
default (``INFERENCE_WORKERS=auto``) and gives each forward the cores split among the forwards
running at that moment: a request alone gets every core (its first audio as soon as the CPU can
make it), requests at once get a core each (the CPU's throughput), never more threads than cores.
torch's thread count is per calling thread, so each worker sets its own before its forward.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator


def cpu_count() -> int:
    """The cores this process may run on (its affinity, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def auto_workers(device: str, cores: int) -> int:
    """``INFERENCE_WORKERS=auto``: a worker per core on a CPU; one on a GPU, whose forwards
    share one device (batching, not workers, is how a GPU serves more at once)."""
    return cores if device == "cpu" else 1


class CoreShare:
    """The threads of each forward: the cores split among the forwards running at once."""

    def __init__(self, cores: int, set_threads: Callable[[int], None]) -> None:
        if cores < 1:
            raise ValueError(f"cores must be >= 1, got {cores}")
        self.cores = cores
        self._set_threads = set_threads
        self._lock = threading.Lock()
        self._running = 0

    @contextlib.contextmanager
    def forward(self) -> Iterator[int]:
        """Around one forward on the calling thread: sets and yields its thread count."""
        with self._lock:
            self._running += 1
            threads = max(1, self.cores // self._running)
        self._set_threads(threads)
        try:
            yield threads
        finally:
            with self._lock:
                self._running -= 1
