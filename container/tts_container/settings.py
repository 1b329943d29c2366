"""Server settings: a typed, frozen class read from the environment.

Tests build ``Settings(...)`` directly; the server builds ``Settings.from_env()``.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tts_container.device import gpu_expected

SAGEMAKER_MODEL_DIR = Path("/opt/ml/model")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "float32", "bfloat16")
SCHEDULERS = ("fifo", "edf")
ENGINES = ("auto", "torch", "onnx", "synthetic")
WEIGHTS = ("trained", "untrained")
# Which weights ran: on every log line, in /ping's X-TTS-Weights and in the artifact.
TRAINED_PACKAGED_LABEL = "trained (int8-derived v1.0)"
TRAINED_MODEL_DIR_LABEL = "trained (model dir)"
UNTRAINED_LABEL = "untrained (development)"
UNTRAINED_FORCED_LABEL = "untrained (development) with trained durations"
SYNTHETIC_LABEL = "synthetic"
MAX_SHUTDOWN_DRAIN_S = 25.0  # + the cut and the close (3 s) stays under SageMaker's 30 s


class SettingsError(ValueError):
    """An environment variable holds a value the server cannot use."""


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "tts-container"


# Six words. Four measured 0.2 s sooner to the first audible speech at N=1 on a 2-core CPU, at the
# same throughput, but one trimmed sentence lost a word to the recognizer (docs/figures.md).
FIRST_SEGMENT_WORDS = 6


@dataclass(frozen=True)
class Settings:
    """What the server reads from its environment (variable names in the field comments)."""

    # QUEUE_MAX_DEPTH: admission bound on in-flight requests (queued + executing); 0 = unbounded.
    queue_max_depth: int = 0
    # MAX_TEXT_CHARS: longest accepted text (or phoneme string), in characters.
    max_text_chars: int = 5000
    # INFERENCE_WORKERS: syntheses that run at once; requests beyond them wait (queue wait).
    # None (auto, the default): one per CPU core on a CPU, one on a GPU (tts_container.cores).
    inference_workers: int | None = None
    # MODEL_NAME: the Model dimension of the metrics.
    model_name: str = "kokoro-82m"
    # MODEL_DIR (or --model-dir): Kokoro files; None = /opt/ml/model if it holds a model, else
    # the ``weights`` below.
    model_dir: Path | None = None
    # WEIGHTS (or --weights): trained (Kokoro-82M v1.0, converted once from the int8 export the
    # model packages carry) or untrained (the development model: noise at the real model's cost).
    weights: str = "trained"
    # FORCE_DURATIONS (or --force-durations): a file of the trained model's per-token durations
    # (benchmarks/record_durations.py), forced into the untrained model (weights=untrained only)
    # so its decoder computes the trained model's frames; labelled "with trained durations".
    force_durations: Path | None = None
    # DEVICE: auto (cuda when available, else cpu), cpu or cuda.
    device: str = "auto"
    # PRECISION: what Kokoro's decoder (the vocoder, most of a forward's compute) computes in:
    # auto (bfloat16 on a CPU with native bfloat16 instructions, else float32), float32 or
    # bfloat16. Durations and prosody are always float32, so the audio keeps its length.
    precision: str = "auto"
    # FIRST_SEGMENT_WORDS: the most words in the first synthesized segment (time to first audio).
    first_segment_words: int = FIRST_SEGMENT_WORDS
    # DEFAULT_VOICE: voice of a request that names none (an English voice the model lacks, such
    # as this one with the trained model's voices, is spoken by its English voice, jm_kumo).
    default_voice: str = "af_heart"
    # TTS_CACHE_DIR: where the trained model is converted, or the development model built, once.
    cache_dir: Path = field(default_factory=_default_cache_dir)
    # SCHEDULER: fifo (each worker runs one whole request at a time, in arrival order) or edf
    # (segments by playback deadline, batched).
    scheduler: str = "fifo"
    # ENGINE: what runs Kokoro-82M: torch (any weights, CPU or GPU), onnx (ONNX Runtime on the
    # model packages' int8 export, CPU only) or auto (onnx where Kokoro runs on a CPU with the
    # packaged trained weights and onnxruntime is installed, torch elsewhere: `kokoro_engine`);
    # or synthetic (no model: a cost model that sleeps, see below).
    engine: str = "auto"
    # BATCH_MAX: most segments one forward takes (edf); 1 = no batching (the CPU default).
    batch_max: int = 1
    # BATCH_WAIT_MS: how long a worker may hold a batch open for more segments (edf, batch > 1);
    # never past the first segment's deadline.
    batch_wait_ms: float = 0.0
    # BATCH_WINDOW_MS: segments due within this long after the earliest one join its batch.
    batch_window_ms: float = 1000.0
    # DEADLINE_MARGIN_MS: a playing stream's next segment is due this long (plus the measured
    # time of one forward) before its player would run dry: how long a new request's first
    # segment may wait before playing streams go first. A little below the TTFAB objective (the
    # default suits the 3000 ms default); smaller, and under load playing streams stall.
    deadline_margin_ms: float = 2500.0
    # MAX_WAIT_MS: starvation bound: a segment that has waited this long runs before any segment
    # that became ready after it, whatever their deadlines.
    max_wait_ms: float = 2000.0
    # SYNTHETIC_BATCH_BASE_MS, SYNTHETIC_SEGMENT_MS: the synthetic engine's forward of B segments
    # takes BASE + B x SEGMENT milliseconds; SYNTHETIC_SEGMENT_AUDIO_S: audio per segment.
    # Defaults: 130 ms for 2 s of audio at batch 1, about 15x faster than real time, like a GPU.
    synthetic_batch_base_ms: float = 60.0
    synthetic_segment_ms: float = 70.0
    synthetic_segment_audio_s: float = 2.0
    # SHUTDOWN_DRAIN_S: after SIGTERM, how long the streams in flight may take to finish before
    # they are cut; at most 25, so the exit stays inside SageMaker's 30 s before SIGKILL.
    shutdown_drain_s: float = 20.0
    # FAULT_GARBLE_BATCHES=1: a planted fault for calibration, never for serving: every answer
    # segment computed in a batch of two or more is played backwards (same length and level,
    # unintelligible), as a batch padding bug would garble it. Only a word error check sees it.
    fault_garble_batches: bool = False

    def __post_init__(self) -> None:
        if self.queue_max_depth < 0:
            raise SettingsError(f"queue_max_depth must be >= 0, got {self.queue_max_depth}")
        if self.max_text_chars < 1:
            raise SettingsError(f"max_text_chars must be >= 1, got {self.max_text_chars}")
        if self.inference_workers is not None and self.inference_workers < 1:
            raise SettingsError(
                f"inference_workers must be auto or >= 1, got {self.inference_workers}"
            )
        if self.first_segment_words < 1:
            raise SettingsError(f"first_segment_words must be >= 1, got {self.first_segment_words}")
        if self.device not in DEVICES:
            raise SettingsError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise SettingsError(
                f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}"
            )
        if self.scheduler not in SCHEDULERS:
            raise SettingsError(
                f"scheduler must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}"
            )
        if self.engine not in ENGINES:
            raise SettingsError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.weights not in WEIGHTS:
            raise SettingsError(
                f"weights must be one of {', '.join(WEIGHTS)}, got {self.weights!r}"
            )
        if self.model_dir is not None and self.weights == "untrained":
            raise SettingsError(
                "weights=untrained and a model directory exclude each other: give one of them"
            )
        if self.force_durations is not None and (
            self.weights != "untrained" or self.engine not in ("auto", "torch")
        ):
            raise SettingsError(
                "force_durations is for the untrained model only (weights=untrained, "
                f"engine=torch or auto), got weights={self.weights}, engine={self.engine}"
            )
        if self.engine == "onnx" and (
            self.model_dir is not None or self.weights != "trained" or self.device == "cuda"
        ):
            raise SettingsError(
                "engine=onnx runs the model packages' int8 export on a CPU only, got "
                f"model_dir={self.model_dir or 'none'}, weights={self.weights}, "
                f"device={self.device}: use engine=torch (or auto)"
            )
        if self.batch_max < 1:
            raise SettingsError(f"batch_max must be >= 1, got {self.batch_max}")
        for name in _NON_NEGATIVE_FLOATS:
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.shutdown_drain_s > MAX_SHUTDOWN_DRAIN_S:
            raise SettingsError(
                f"shutdown_drain_s must be <= {MAX_SHUTDOWN_DRAIN_S:g} (SageMaker kills 30 s after "
                f"SIGTERM), got {self.shutdown_drain_s:g}"
            )
        if self.synthetic_segment_audio_s <= 0:
            raise SettingsError(
                f"synthetic_segment_audio_s must be > 0, got {self.synthetic_segment_audio_s}"
            )

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
            "first_segment_words": "FIRST_SEGMENT_WORDS",
            "batch_max": "BATCH_MAX",
        }
        for name, variable in ints.items():
            raw = env.get(variable, "").strip()
            if raw:
                values[name] = _parse_int(variable, raw)
        raw = env.get("INFERENCE_WORKERS", "").strip()
        if raw and raw != "auto":
            if not raw.isdigit():
                raise SettingsError(f"INFERENCE_WORKERS must be auto or an integer, got {raw!r}")
            values["inference_workers"] = int(raw)
        for name, variable in (
            ("model_name", "MODEL_NAME"),
            ("device", "DEVICE"),
            ("precision", "PRECISION"),
            ("default_voice", "DEFAULT_VOICE"),
            ("scheduler", "SCHEDULER"),
            ("engine", "ENGINE"),
            ("weights", "WEIGHTS"),
        ):
            raw = env.get(variable, "").strip()
            if raw:
                values[name] = raw
        for name, variable in _FLOAT_VARIABLES.items():
            raw = env.get(variable, "").strip()
            if raw:
                values[name] = _parse_float(variable, raw)
        raw = env.get("FAULT_GARBLE_BATCHES", "").strip()
        if raw:
            values["fault_garble_batches"] = _parse_flag("FAULT_GARBLE_BATCHES", raw)
        for name, variable in (
            ("model_dir", "MODEL_DIR"),
            ("cache_dir", "TTS_CACHE_DIR"),
            ("force_durations", "FORCE_DURATIONS"),
        ):
            raw = env.get(variable, "").strip()
            if raw:
                values[name] = Path(raw).expanduser()
        values.update(overrides)
        try:
            return cls(**values)
        except SettingsError as exc:
            raise SettingsError(f"{exc} (check the environment variables)") from None

    @functools.cached_property
    def weights_label(self) -> str:
        """Which weights the server runs, in the order the model files are resolved."""
        if self.engine == "synthetic":
            return SYNTHETIC_LABEL
        if self.model_dir is not None:
            return TRAINED_MODEL_DIR_LABEL
        if self.weights == "untrained":
            return UNTRAINED_LABEL if self.force_durations is None else UNTRAINED_FORCED_LABEL
        if holds_model(SAGEMAKER_MODEL_DIR):
            return TRAINED_MODEL_DIR_LABEL
        return TRAINED_PACKAGED_LABEL

    @functools.cached_property
    def kokoro_engine(self) -> str:
        """The engine that runs: ENGINE, with auto resolved (measured on a 2-core CPU: the int8
        export on ONNX Runtime costs less CPU per second of audio than torch, docs/figures.md;
        a GPU runs torch, onnxruntime's CPU build does not use it)."""
        if self.engine != "auto":
            return self.engine
        packaged = self.weights_label == TRAINED_PACKAGED_LABEL
        gpu = self.device == "cuda" or (self.device == "auto" and gpu_expected(os.environ))
        on_cpu = not gpu
        return "onnx" if packaged and on_cpu and _installed("onnxruntime") else "torch"

    @property
    def labels(self) -> dict[str, str]:
        """Which engine, scheduler and weights: on every log line, metrics line and ``/ping``."""
        return {
            "engine": self.kokoro_engine,
            "scheduler": self.scheduler,
            "weights": self.weights_label,
        }


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def holds_model(directory: Path) -> bool:
    """Whether ``directory`` holds Kokoro weights at all."""
    return directory.is_dir() and any(directory.glob("*.pth"))


_FLOAT_VARIABLES = {
    "shutdown_drain_s": "SHUTDOWN_DRAIN_S",
    "batch_wait_ms": "BATCH_WAIT_MS",
    "batch_window_ms": "BATCH_WINDOW_MS",
    "deadline_margin_ms": "DEADLINE_MARGIN_MS",
    "max_wait_ms": "MAX_WAIT_MS",
    "synthetic_batch_base_ms": "SYNTHETIC_BATCH_BASE_MS",
    "synthetic_segment_ms": "SYNTHETIC_SEGMENT_MS",
    "synthetic_segment_audio_s": "SYNTHETIC_SEGMENT_AUDIO_S",
}
_NON_NEGATIVE_FLOATS = tuple(
    name for name in _FLOAT_VARIABLES if name != "synthetic_segment_audio_s"
)


def _parse_int(variable: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{variable} must be an integer, got {raw!r}") from None
    if value < 0:
        raise SettingsError(f"{variable} must be >= 0, got {value}")
    return value


def _parse_flag(variable: str, raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{variable} must be 1 or 0 (true/false), got {raw!r}")


def _parse_float(variable: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{variable} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise SettingsError(f"{variable} must be a finite number >= 0, got {raw!r}")
    return value
