"""Where the Kokoro files are: a model directory, or the development model built into the cache.

A model directory holds ``config.json`` (optional: the packaged Kokoro-82M config is used when it
is missing), one ``*.pth`` whose top-level keys are bert, bert_encoder, predictor, text_encoder and
decoder, and voice packs ``voices/*.pt`` (or ``*.pt`` beside the weights), each [510, 1, 256].
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tts_container.settings import (
    SAGEMAKER_MODEL_DIR,
    TRAINED_MODEL_DIR_LABEL,
    UNTRAINED_LABEL,
    Settings,
    holds_model,
)

WEIGHT_KEYS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


class ModelFilesError(RuntimeError):
    """A model directory lacks a file the server needs."""


@dataclass(frozen=True)
class ModelFiles:
    root: Path
    config: Path
    weights: Path
    voices: dict[str, Path]
    label: str = TRAINED_MODEL_DIR_LABEL

    @property
    def untrained(self) -> bool:
        return self.label == UNTRAINED_LABEL


def packaged_config() -> Path:
    """The Kokoro-82M ``config.json`` shipped in this package (from kokoro-onnx, MIT)."""
    return Path(str(resources.files("tts_container").joinpath("config.json")))


def check_weight_keys(weights: Path) -> None:
    """The ``.pth`` has Kokoro's five top-level keys, so a wrong file fails here in one line
    rather than inside Kokoro's loader. Memory-mapped: only the key table is read."""
    import torch

    try:
        state = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:
        raise ModelFilesError(f"weights {weights} cannot be read: {exc}") from None
    found = set(state) if isinstance(state, dict) else set()
    missing = [key for key in WEIGHT_KEYS if key not in found]
    if missing:
        raise ModelFilesError(
            f"weights {weights} lack the top-level keys {', '.join(missing)}: expected "
            f"{', '.join(WEIGHT_KEYS)} (found: {', '.join(sorted(map(str, found))) or 'none'})"
        )


def find_model_files(directory: Path) -> ModelFiles:
    """The files of the model in ``directory``; `ModelFilesError` says what is missing."""
    if not directory.is_dir():
        raise ModelFilesError(f"model directory {directory} does not exist")
    weights = sorted(directory.glob("*.pth"))
    if len(weights) != 1:
        found = ", ".join(p.name for p in weights) or "none"
        raise ModelFilesError(
            f"model directory {directory} must hold exactly one *.pth weights file (found: {found})"
        )
    voice_files = sorted((directory / "voices").glob("*.pt")) or sorted(directory.glob("*.pt"))
    if not voice_files:
        raise ModelFilesError(
            f"model directory {directory} holds no voice packs: expected voices/*.pt"
        )
    config = directory / "config.json"
    return ModelFiles(
        root=directory,
        config=config if config.is_file() else packaged_config(),
        weights=weights[0],
        voices={path.stem: path for path in voice_files},
    )


def resolve_model_files(settings: Settings) -> ModelFiles:
    """``settings.model_dir`` if set; the development model if ``weights`` is untrained; else
    /opt/ml/model if it holds a model; else the trained model from its packages. Never a silent
    fallback: a missing package or a failed conversion raises `ModelFilesError`."""
    if settings.model_dir is not None:
        return find_model_files(settings.model_dir)
    if settings.weights == "untrained":
        from tts_container.dev_model import ensure_dev_model

        return ensure_dev_model(settings.cache_dir)
    if holds_model(SAGEMAKER_MODEL_DIR):
        return find_model_files(SAGEMAKER_MODEL_DIR)
    from tts_container.trained_model import ensure_trained_model

    return ensure_trained_model(settings.cache_dir)
