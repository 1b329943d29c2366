"""The offline development model: the real architecture, cached, sane audio lengths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tts_container import dev_model
from tts_container.dev_model import MANIFEST_NAME, dev_model_dir, ensure_dev_model
from tts_container.engine import synthesize_all
from tts_container.request import SynthesisRequest
from tts_container.settings import Settings

if TYPE_CHECKING:  # torch loads on first use, not at collection
    from tts_container.engine import KokoroEngine

FRAME_SAMPLES = 600  # 25 ms at 24 kHz
TEN_WORDS = "The quick brown fox jumps over the lazy dog today."


@pytest.fixture(scope="module")
def engine(dev_model_cache: Path) -> KokoroEngine:
    from tts_container.engine import KokoroEngine

    return KokoroEngine.load(Settings(cache_dir=dev_model_cache, device="cpu", weights="untrained"))


def test_the_cache_holds_the_files_of_a_model_directory(dev_model_cache: Path) -> None:
    root = dev_model_dir(dev_model_cache)
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    assert manifest["untrained"] is True
    assert (root / "config.json").is_file()
    assert (root / "kokoro-dev.pth").is_file()
    assert sorted(p.stem for p in (root / "voices").glob("*.pt")) == [
        "af_bella",
        "af_heart",
        "am_adam",
    ]


def test_it_has_the_parameter_count_of_kokoro_82m(engine: KokoroEngine) -> None:
    parameters = sum(p.numel() for p in engine._model.parameters())
    assert parameters == pytest.approx(81.8e6, abs=0.05e6)
    assert engine.untrained


def test_weights_have_the_top_level_keys_of_a_kokoro_checkpoint(dev_model_cache: Path) -> None:
    import torch

    weights = torch.load(dev_model_dir(dev_model_cache) / "kokoro-dev.pth", weights_only=True)
    assert sorted(weights) == sorted(
        ["bert", "bert_encoder", "predictor", "text_encoder", "decoder"]
    )
    voice = torch.load(dev_model_dir(dev_model_cache) / "voices" / "af_heart.pt", weights_only=True)
    assert tuple(voice.shape) == (510, 1, 256)


def test_a_second_build_loads_from_the_cache(
    dev_model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = dev_model_dir(dev_model_cache) / "kokoro-dev.pth"
    before = weights.stat().st_mtime_ns

    def no_rebuild(target: Path) -> None:
        raise AssertionError(f"rebuilt {target} although it was cached")

    monkeypatch.setattr(dev_model, "build_dev_model", no_rebuild)
    files = ensure_dev_model(dev_model_cache)
    assert files.root == dev_model_dir(dev_model_cache)
    assert files.untrained
    assert weights.stat().st_mtime_ns == before


def test_the_build_is_deterministic(dev_model_cache: Path, tmp_path: Path) -> None:
    import torch

    voices = dev_model.VOICES
    dev_model.build_dev_model(tmp_path / "again")
    for name in voices:
        first = torch.load(
            dev_model_dir(dev_model_cache) / "voices" / f"{name}.pt", weights_only=True
        )
        second = torch.load(tmp_path / "again" / "voices" / f"{name}.pt", weights_only=True)
        assert torch.equal(first, second)
    first_w = torch.load(dev_model_dir(dev_model_cache) / "kokoro-dev.pth", weights_only=True)
    second_w = torch.load(tmp_path / "again" / "kokoro-dev.pth", weights_only=True)
    for key in ("bert", "decoder"):
        for name, tensor in first_w[key].items():
            assert torch.equal(tensor, second_w[key][name]), f"{key}.{name} differs"


def test_each_phoneme_gets_a_few_frames_and_a_sentence_a_sane_length(
    engine: KokoroEngine,
) -> None:
    import torch

    request = SynthesisRequest(request_id="t", text=TEN_WORDS, voice="af_heart")
    pieces = list(engine.phoneme_pieces(request))
    assert len(pieces) >= 2  # the first segment is short
    assert len(pieces[0].split()) <= 6
    frames = []
    for piece in pieces:
        with torch.inference_mode():
            output = engine._model(
                piece, engine._voice_packs["af_heart"][len(piece) - 1], 1.0, True
            )
        durations = output.pred_dur.tolist()
        frames.extend(durations[1:-1])  # without the boundary tokens
        assert output.audio.shape[-1] == sum(durations) * FRAME_SAMPLES
    assert min(frames) >= 2
    assert max(frames) <= 6
    assert 2.5 <= sum(frames) / len(frames) <= 4.5

    audio = list(synthesize_all(engine, request))
    seconds = sum(chunk.shape[-1] for chunk in audio) / engine.sample_rate
    assert 0.5 <= seconds <= 15.0
    assert all(chunk.dtype.name == "float32" for chunk in audio)


def test_speed_shortens_the_audio(engine: KokoroEngine) -> None:
    def seconds(speed: float) -> float:
        request = SynthesisRequest(
            request_id="s", phonemes="hˈɛloʊ wˈɜːld.", voice="am_adam", speed=speed
        )
        return sum(c.shape[-1] for c in synthesize_all(engine, request)) / engine.sample_rate

    assert seconds(2.0) < seconds(1.0) < seconds(0.5)


def test_g2p_works_offline() -> None:
    from tts_container.g2p import load_g2p

    g2p = load_g2p(prefer_misaki=None)
    phonemes = g2p("Hello world.")
    assert phonemes
    assert "h" in phonemes
    assert phonemes.endswith(".")


def test_abandoned_builds_are_removed_once_old(tmp_path: Path) -> None:
    import os
    import time

    old = tmp_path / ".building-old"
    young = tmp_path / ".building-young"
    for directory in (old, young):
        directory.mkdir()
        (directory / "part.pth").write_bytes(b"x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    dev_model.remove_abandoned_builds(tmp_path)
    assert not old.exists()
    assert young.exists()
