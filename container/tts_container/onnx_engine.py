"""Kokoro-82M on ONNX Runtime: the model packages' int8 export run as exported, on a CPU.

The export (``kokoro-v1.0.int8.onnx``, the same graph `tts_container.trained_model` dequantizes
for torch) computes in int8 where torch computes the dequantized weights in float32 or bfloat16:
on a CPU it costs less per second of audio. It sits behind the same segmenting, G2P, streaming,
scheduling, admission and drain as the torch engine (`KokoroText`), and its audio leaves through
the same edge trimming.

Its graph takes one utterance at a time (token input [1, length]), so a batch of segments runs
one by one, in one share of the cores. Threads follow the core split (`tts_container.cores`):
ONNX Runtime fixes a session's thread count, so there is a session per count the split hands out
(a request alone on every core, requests at once on a core each), all of one graph; a session of
one thread runs on the calling worker's own thread, one of more keeps idle threads asleep rather
than spinning on cores other forwards need.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tts_container.cores import CoreShare, cpu_count
from tts_container.engine import KokoroPiece, KokoroText, Samples
from tts_container.settings import FIRST_SEGMENT_WORDS, TRAINED_PACKAGED_LABEL, Settings

log = logging.getLogger(__name__)

ONNXRUNTIME_INSTALL = "pip install 'tts-container[onnx]'"


def session_options(threads: int) -> Any:
    """One forward on ``threads`` cores; its idle threads sleep instead of spinning."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.log_severity_level = 3  # the export's unused initializers warn at every load
    return options


class Sessions:
    """The export's sessions, one per thread count, each made once (Run is thread-safe)."""

    def __init__(self, export: bytes, make: Callable[[bytes, int], Any] | None = None) -> None:
        self._export = export
        self._make = make or _cpu_session
        self._by_threads: dict[int, Any] = {}
        self._lock = threading.Lock()

    def get(self, threads: int) -> Any:
        with self._lock:
            session = self._by_threads.get(threads)
            if session is None:
                session = self._by_threads[threads] = self._make(self._export, threads)
            return session

    def prepare(self, cores: int) -> None:
        """Every session the core split can ask for (cores // n forwards at once), made now."""
        for threads in sorted({max(1, cores // running) for running in range(1, cores + 1)}):
            self.get(threads)


def _cpu_session(export: bytes, threads: int) -> Any:
    import onnxruntime

    return onnxruntime.InferenceSession(
        export, session_options(threads), providers=["CPUExecutionProvider"]
    )


class OnnxKokoroEngine(KokoroText):
    """Kokoro's int8 export through ONNX Runtime on a CPU; one segment per run."""

    device = "cpu"
    forced = None  # FORCE_DURATIONS is the torch engine's (the untrained model)

    def __init__(
        self,
        sessions: Sessions,
        voice_packs: Mapping[str, Samples],
        vocab: Mapping[str, int],
        g2p: Any,
        *,
        first_segment_words: int = FIRST_SEGMENT_WORDS,
        japanese_g2p: Any = None,
        cores: CoreShare | None = None,
    ) -> None:
        super().__init__(
            tuple(voice_packs),
            g2p,
            vocab,
            first_segment_words=first_segment_words,
            japanese_g2p=japanese_g2p,
        )
        self._sessions = sessions
        self._voice_packs = dict(voice_packs)
        self._cores = cores or CoreShare(cpu_count(), lambda _threads: None)
        self.weights_label = TRAINED_PACKAGED_LABEL

    @classmethod
    def load(
        cls, settings: Settings, on_framework_init: Callable[[], None] | None = None
    ) -> OnnxKokoroEngine:
        """The export joined and checked from the model packages, its sessions and voices."""
        try:
            import onnxruntime
        except ImportError:
            raise RuntimeError(
                f"ENGINE=onnx needs onnxruntime ({ONNXRUNTIME_INSTALL}); or ENGINE=torch"
            ) from None
        if settings.weights_label != TRAINED_PACKAGED_LABEL:  # /opt/ml/model holds weights
            raise RuntimeError(
                f"ENGINE=onnx runs the model packages' int8 export, but the weights here are "
                f"{settings.weights_label}: use ENGINE=torch or auto"
            )
        if on_framework_init is not None:
            on_framework_init()

        from tts_container.g2p import load_g2p, load_japanese_g2p
        from tts_container.model_files import packaged_config
        from tts_container.trained_model import (
            assemble_export,
            locate_package_files,
            read_voice_packs,
        )

        parts, voices = locate_package_files()
        cores = cpu_count()
        sessions = Sessions(assemble_export(parts))
        sessions.prepare(cores)
        vocab = json.loads(packaged_config().read_text(encoding="utf-8"))["vocab"]
        packs = read_voice_packs(voices)
        log.info(
            "model kokoro-v1.0.int8.onnx on onnxruntime %s (CPU, sessions of 1 to %d threads), "
            "weights: %s, voices: %s",
            onnxruntime.__version__,
            cores,
            TRAINED_PACKAGED_LABEL,
            ", ".join(packs),
        )
        return cls(
            sessions,
            packs,
            vocab,
            load_g2p(),
            first_segment_words=settings.first_segment_words,
            japanese_g2p=load_japanese_g2p(),
            cores=CoreShare(cores, lambda _threads: None),
        )

    def run_tokens(self, ids: Sequence[int], style: Samples, speed: float, threads: int) -> Samples:
        """The export's audio for token ids (the boundary tokens added here)."""
        [audio] = self._sessions.get(threads).run(
            ["audio"],
            {
                "tokens": np.array([[0, *ids, 0]], dtype=np.int64),
                "style": np.asarray(style, dtype=np.float32).reshape(1, 256),
                "speed": np.array([speed], dtype=np.float32),
            },
        )
        return np.asarray(audio, dtype=np.float32).reshape(-1)

    def synthesize(self, batch: Sequence[KokoroPiece]) -> list[Samples]:
        with self._cores.forward() as threads:
            out = []
            for piece in batch:
                ids = [self._vocab[symbol] for symbol in piece.phonemes]
                style = self._voice_packs[piece.voice][len(ids) - 1]
                out.append(self.run_tokens(ids, style, piece.speed, threads))
            return out
