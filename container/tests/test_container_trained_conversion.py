"""The trained model converted from the packages' int8 export: once, atomically, reproducibly,
into a model directory KModel loads with every tensor (e2e: the conversion takes seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tts_container import trained_model
from tts_container.engine import KokoroEngine
from tts_container.settings import TRAINED_PACKAGED_LABEL, Settings


def test_the_conversion_is_a_complete_model_directory(trained_model_cache: Path) -> None:
    directory = trained_model.trained_model_dir(trained_model_cache)
    manifest = json.loads((directory / trained_model.MANIFEST_NAME).read_text())
    assert manifest["sha256"] == trained_model.EXPORT_SHA256
    assert manifest["tensors"] == 688
    assert manifest["voices"] == [
        "jf_alpha",
        "jf_gongitsune",
        "jf_nezumi",
        "jf_tebukuro",
        "jm_kumo",
    ]
    assert not list(trained_model_cache.glob(".building-*"))  # built aside, renamed into place
    state = torch.load(directory / trained_model.WEIGHTS_NAME, weights_only=True)
    assert all(torch.isfinite(t).all() for module in state.values() for t in module.values())


def test_a_second_start_reuses_the_conversion(trained_model_cache: Path) -> None:
    weights = trained_model.trained_model_dir(trained_model_cache) / trained_model.WEIGHTS_NAME
    before = weights.stat().st_mtime_ns
    files = trained_model.ensure_trained_model(trained_model_cache)
    assert files.weights == weights
    assert files.label == TRAINED_PACKAGED_LABEL
    assert weights.stat().st_mtime_ns == before


def test_the_conversion_is_reproducible(trained_model_cache: Path) -> None:
    parts, _ = trained_model.locate_package_files()
    again = trained_model.convert_export(trained_model.assemble_export(parts))
    directory = trained_model.trained_model_dir(trained_model_cache)
    stored = torch.load(directory / trained_model.WEIGHTS_NAME, weights_only=True)
    for top, module in stored.items():
        for name, tensor in module.items():
            assert torch.equal(tensor, again[top][name]), f"{top}.{name}"


def test_the_engine_loads_it_with_the_english_voice(trained_model_cache: Path) -> None:
    engine = KokoroEngine.load(Settings(cache_dir=trained_model_cache, device="cpu"))
    assert engine.weights_label == TRAINED_PACKAGED_LABEL
    assert "jm_kumo" in list(engine.voices)
    assert engine.voices.resolve("af_heart") == "jm_kumo"
