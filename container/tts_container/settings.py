"""Server settings: a typed, frozen class read from the environment.

Tests build ``Settings(...)`` directly; the server builds ``Settings.from_env()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

SAGEMAKER_MODEL_DIR = Path("/opt/ml/model")
DEVICES = ("auto", "cpu", "cuda")


class SettingsError(ValueError):
    """An environment variable holds a value the server cannot use."""


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "tts-container"


@dataclass(frozen=True)
class Settings:
    """What the server reads from its environment (variable names in the field comments)."""

    # QUEUE_MAX_DEPTH: admission bound on in-flight requests (queued + executing); 0 = unbounded.
    queue_max_depth: int = 0
    # MAX_TEXT_CHARS: longest accepted text (or phoneme string), in characters.
    max_text_chars: int = 5000
    # INFERENCE_WORKERS: syntheses that run at once; requests beyond them wait (queue wait).
    inference_workers: int = 1
    # MODEL_NAME: the Model dimension of the metrics.
    model_name: str = "kokoro-82m"
    # MODEL_DIR (or --model-dir): Kokoro files; None = /opt/ml/model if it holds a model, else
    # the untrained development model.
    model_dir: Path | None = None
    # DEVICE: auto (cuda when available, else cpu), cpu or cuda.
    device: str = "auto"
    # FIRST_SEGMENT_WORDS: the most words in the first synthesized segment (time to first audio).
    first_segment_words: int = 6
    # DEFAULT_VOICE: voice of a request that names none (falls back to the first voice).
    default_voice: str = "af_heart"
    # TTS_CACHE_DIR: where the development model is built once and reused.
    cache_dir: Path = field(default_factory=_default_cache_dir)

    def __post_init__(self) -> None:
        if self.queue_max_depth < 0:
            raise SettingsError(f"queue_max_depth must be >= 0, got {self.queue_max_depth}")
        if self.max_text_chars < 1:
            raise SettingsError(f"max_text_chars must be >= 1, got {self.max_text_chars}")
        if self.inference_workers < 1:
            raise SettingsError(f"inference_workers must be >= 1, got {self.inference_workers}")
        if self.first_segment_words < 1:
            raise SettingsError(f"first_segment_words must be >= 1, got {self.first_segment_words}")
        if self.device not in DEVICES:
            raise SettingsError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")

    @property
    def gate_enabled(self) -> bool:
        return self.queue_max_depth > 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``environ`` (default ``os.environ``); keyword ``overrides`` win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        ints = {
            "queue_max_depth": "QUEUE_MAX_DEPTH",
            "max_text_chars": "MAX_TEXT_CHARS",
            "inference_workers": "INFERENCE_WORKERS",
            "first_segment_words": "FIRST_SEGMENT_WORDS",
        }
        for name, variable in ints.items():
            raw = env.get(variable, "").strip()
            if raw:
                values[name] = _parse_int(variable, raw)
        for name, variable in (
            ("model_name", "MODEL_NAME"),
            ("device", "DEVICE"),
            ("default_voice", "DEFAULT_VOICE"),
        ):
            raw = env.get(variable, "").strip()
            if raw:
                values[name] = raw
        for name, variable in (("model_dir", "MODEL_DIR"), ("cache_dir", "TTS_CACHE_DIR")):
            raw = env.get(variable, "").strip()
            if raw:
                values[name] = Path(raw).expanduser()
        values.update(overrides)
        try:
            return cls(**values)
        except SettingsError as exc:
            raise SettingsError(f"{exc} (check the environment variables)") from None

    def with_overrides(self, **overrides: Any) -> Settings:
        return replace(self, **overrides)


def _parse_int(variable: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{variable} must be an integer, got {raw!r}") from None
    if value < 0:
        raise SettingsError(f"{variable} must be >= 0, got {value}")
    return value
