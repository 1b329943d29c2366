"""ENGINE: which engine runs Kokoro, and the ONNX Runtime engine's sessions and threads (no model
runs here: test_container_speech.py holds its audio to the torch engine's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tts_container.cores import CoreShare
from tts_container.engine import KokoroPiece
from tts_container.onnx_engine import OnnxKokoroEngine, Sessions, session_options
from tts_container.settings import Settings, SettingsError


@pytest.fixture
def no_gpu_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tts_container.settings.gpu_expected", lambda _env: None)


@pytest.mark.usefixtures("no_gpu_here")
def test_auto_runs_onnx_on_a_cpu_with_the_packaged_weights_and_torch_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tts_container.settings.holds_model", lambda _directory: False)
    assert Settings(device="cpu").kokoro_engine == "onnx"
    assert Settings(device="auto").kokoro_engine == "onnx"
    assert Settings(device="auto").labels["engine"] == "onnx"
    assert Settings(device="cuda").kokoro_engine == "torch"
    assert Settings(device="cpu", model_dir=tmp_path).kokoro_engine == "torch"
    assert Settings(device="cpu", weights="untrained").kokoro_engine == "torch"
    assert Settings(device="cpu", engine="torch").labels["engine"] == "torch"
    assert Settings(engine="synthetic").labels["engine"] == "synthetic"
    monkeypatch.setattr("tts_container.settings.gpu_expected", lambda _env: "a GPU instance")
    assert Settings(device="auto").kokoro_engine == "torch"
    monkeypatch.setattr("tts_container.settings.gpu_expected", lambda _env: None)
    monkeypatch.setattr("tts_container.settings._installed", lambda _module: False)
    assert Settings(device="cpu").kokoro_engine == "torch"


@pytest.mark.parametrize(
    "settings",
    [
        {"model_dir": Path("/tmp")},
        {"weights": "untrained"},
        {"device": "cuda"},
    ],
)
def test_onnx_with_other_weights_or_a_gpu_is_refused_in_one_line(settings: dict[str, Any]) -> None:
    with pytest.raises(SettingsError, match="engine=onnx runs the model packages' int8 export"):
        Settings(engine="onnx", **settings)
    with pytest.raises(SettingsError, match="engine=onnx"):
        Settings.from_env({"ENGINE": "onnx", **{k.upper(): str(v) for k, v in settings.items()}})


def test_onnx_refuses_other_weights_the_model_directory_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("tts_container.settings.holds_model", lambda _directory: True)
    with pytest.raises(RuntimeError, match=r"weights here are trained \(model dir\)"):
        OnnxKokoroEngine.load(Settings(engine="onnx", device="cpu"))


def test_idle_threads_sleep_and_the_count_is_the_sessions() -> None:
    options = session_options(2)
    assert options.intra_op_num_threads == 2
    assert options.inter_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"


@pytest.mark.parametrize(
    ("cores", "counts"), [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 3, 6])]
)
def test_a_session_for_each_thread_count_the_core_split_hands_out(
    cores: int, counts: list[int]
) -> None:
    made: list[int] = []

    def make(_export: bytes, threads: int) -> int:
        made.append(threads)
        return threads

    sessions = Sessions(b"graph", make)
    sessions.prepare(cores)
    assert made == counts
    assert sessions.get(counts[-1]) == counts[-1]
    assert made == counts  # made once


class RecordingSession:
    """Stands for an onnxruntime session: records each run's inputs, answers a second of audio."""

    def __init__(self, threads: int, runs: list[tuple[int, dict[str, Any]]]) -> None:
        self.threads = threads
        self.runs = runs

    def run(self, outputs: list[str], feed: dict[str, Any]) -> list[Any]:
        assert outputs == ["audio"]
        self.runs.append((self.threads, feed))
        return [np.full(24000, 0.5, dtype=np.float32)]


def test_a_batch_runs_one_segment_at_a_time_on_the_cores_split() -> None:
    """The graph takes one utterance: each piece its own run, with its tokens (boundaries added),
    the voice's style for its length and its speed, all on the share of cores the batch got."""
    runs: list[tuple[int, dict[str, Any]]] = []
    sessions = Sessions(b"graph", lambda _export, threads: RecordingSession(threads, runs))
    pack = np.arange(510 * 256, dtype=np.float32).reshape(510, 1, 256)
    share = CoreShare(2, lambda _threads: None)
    engine = OnnxKokoroEngine(
        sessions, {"jm_kumo": pack}, {"a": 5, "b": 6}, lambda text: text, cores=share
    )
    pieces = [KokoroPiece("ab", "jm_kumo", 1.0), KokoroPiece("bab", "jm_kumo", 1.25)]
    audio = engine.synthesize(pieces)
    assert [len(a) for a in audio] == [24000, 24000]
    with share.forward():  # another forward running: this one gets a core
        engine.synthesize(pieces[:1])
    assert [threads for threads, _ in runs] == [2, 2, 1]
    first, second = runs[0][1], runs[1][1]
    assert first["tokens"].tolist() == [[0, 5, 6, 0]]
    assert second["tokens"].tolist() == [[0, 6, 5, 6, 0]]
    assert np.array_equal(first["style"], pack[1].reshape(1, 256))
    assert np.array_equal(second["style"], pack[2].reshape(1, 256))
    assert second["speed"].tolist() == [1.25]
