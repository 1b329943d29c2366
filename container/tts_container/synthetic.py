"""The synthetic engine (``ENGINE=synthetic``): the real server, scheduler and gate, no model.

A forward of B segments sleeps ``SYNTHETIC_BATCH_BASE_MS + B x SYNTHETIC_SEGMENT_MS`` (the shape
of a GPU forward: a fixed cost plus a small one per sequence) and returns
``SYNTHETIC_SEGMENT_AUDIO_S`` of a quiet tone per segment; the text is split into segments as the
real engine splits it. The sleep releases the GIL, as a GPU kernel does, so the scheduler's gain
can be measured on any machine. Everything it serves is labelled synthetic: the log lines, the
metrics lines, ``/ping`` and the ``X-TTS-Engine`` response header.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from tts_container.dev_model import VOICES
from tts_container.engine import KOKORO_SAMPLE_RATE, MAX_SEGMENT_CHARS, Samples
from tts_container.markers import emit_marker
from tts_container.request import SynthesisRequest
from tts_container.segmenter import split_segments
from tts_container.settings import FIRST_SEGMENT_WORDS, Settings

log = logging.getLogger(__name__)

TONE_HZ = 220.0
TONE_AMPLITUDE = 0.1

SYNTHETIC_BANNER = """
################################################################################
##  SYNTHETIC ENGINE: no model runs. Each forward sleeps as a cost model says   ##
##  and returns a tone. Figures measured on it are the scheduler's, no model's. ##
################################################################################"""


class SyntheticEngine:
    """A cost model in place of Kokoro: see the module docstring."""

    sample_rate = KOKORO_SAMPLE_RATE

    def __init__(
        self,
        *,
        batch_base_s: float,
        segment_s: float,
        segment_audio_s: float,
        first_segment_words: int = FIRST_SEGMENT_WORDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.batch_base_s = batch_base_s
        self.segment_s = segment_s
        self.segment_audio_s = segment_audio_s
        self.first_segment_words = first_segment_words
        self._sleep = sleep
        samples = round(segment_audio_s * self.sample_rate)
        phase = 2 * np.pi * TONE_HZ * np.arange(samples) / self.sample_rate
        self._tone = (TONE_AMPLITUDE * np.sin(phase)).astype(np.float32)

    @classmethod
    def from_settings(cls, settings: Settings) -> SyntheticEngine:
        return cls(
            batch_base_s=settings.synthetic_batch_base_ms / 1000.0,
            segment_s=settings.synthetic_segment_ms / 1000.0,
            segment_audio_s=settings.synthetic_segment_audio_s,
            first_segment_words=settings.first_segment_words,
        )

    @property
    def voices(self) -> Sequence[str]:
        return VOICES

    @property
    def unavailable_languages(self) -> Mapping[str, str]:
        return {}  # no text is read: a tone per segment whatever the language

    def forward_s(self, batch_size: int) -> float:
        """Seconds one forward of ``batch_size`` segments takes."""
        return self.batch_base_s + batch_size * self.segment_s

    def realtime_factor(self, batch_size: int = 1) -> float:
        """Audio seconds made per second of forward time (like RTFx)."""
        return batch_size * self.segment_audio_s / self.forward_s(batch_size)

    def pieces(self, request: SynthesisRequest) -> Iterator[str]:
        yield from split_segments(request.source, self.first_segment_words, MAX_SEGMENT_CHARS)

    def synthesize(self, batch: Sequence[str]) -> list[Samples]:
        self._sleep(self.forward_s(len(batch)))
        return [self._tone for _ in batch]


def synthetic_engine_factory(settings: Settings) -> SyntheticEngine:
    """The engine factory for ``ENGINE=synthetic`` (writes the same startup markers)."""
    emit_marker("framework_init")
    log.warning(SYNTHETIC_BANNER)
    engine = SyntheticEngine.from_settings(settings)
    log.info(
        "synthetic engine: forward = %.0f ms + B x %.0f ms, %.2f s of audio per segment "
        "(%.1fx real time at batch 1, %.1fx at batch %d)",
        engine.batch_base_s * 1000,
        engine.segment_s * 1000,
        engine.segment_audio_s,
        engine.realtime_factor(1),
        engine.realtime_factor(settings.batch_max),
        settings.batch_max,
    )
    return engine
