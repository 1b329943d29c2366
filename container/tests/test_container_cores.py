"""A CPU's inference workers and their share of its cores (tts_container.cores)."""

from __future__ import annotations

import threading

import pytest
import torch
from tts_container.cores import CoreShare, auto_workers
from tts_container.engine import inference_workers, set_torch_threads
from tts_container.settings import Settings

JOIN_TIMEOUT_S = 60.0


def test_auto_is_a_worker_per_core_on_a_cpu_and_one_on_a_gpu() -> None:
    assert auto_workers("cpu", 2) == 2
    assert auto_workers("cpu", 16) == 16
    assert auto_workers("cuda", 16) == 1


def test_inference_workers_resolves_auto_for_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tts_container.engine.cpu_count", lambda: 4)
    assert inference_workers(Settings(device="cpu")) == 4
    assert inference_workers(Settings(device="cuda")) == 1
    assert inference_workers(Settings(engine="synthetic")) == 1  # a GPU's cost model
    assert inference_workers(Settings(device="cpu", inference_workers=1)) == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert inference_workers(Settings(device="auto")) == 4
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert inference_workers(Settings(device="auto")) == 1


def test_a_forward_alone_gets_every_core_and_forwards_at_once_split_them() -> None:
    calls: list[int] = []
    share = CoreShare(4, calls.append)
    with share.forward() as alone, share.forward() as second, share.forward() as third:
        pass
    with share.forward() as after:
        pass
    assert (alone, second, third, after) == (4, 2, 1, 4)
    assert calls == [4, 2, 1, 4]


def test_a_failed_forward_gives_its_cores_back() -> None:
    share = CoreShare(2, lambda _threads: None)
    with pytest.raises(RuntimeError), share.forward():
        raise RuntimeError("forward failed")
    with share.forward() as threads:
        assert threads == 2


def test_torch_threads_are_set_per_worker_thread() -> None:
    """The first of two workers in their forwards at once keeps both cores it took alone, the
    second runs on one: each thread sees its own count, and the caller's stays."""
    before = torch.get_num_threads()
    share = CoreShare(2, set_torch_threads)
    both_in = threading.Barrier(2, timeout=JOIN_TIMEOUT_S)
    seen: dict[int, int] = {}

    def worker(index: int) -> None:
        with share.forward():
            both_in.wait()
            seen[index] = torch.get_num_threads()
            both_in.wait()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert sorted(seen.values()) == [1, 2], seen
    assert torch.get_num_threads() == before


def test_cores_must_be_positive() -> None:
    with pytest.raises(ValueError, match="cores must be >= 1, got 0"):
        CoreShare(0, lambda _threads: None)
