"""The silence Kokoro speaks at a segment's edges, cut from the decoded audio (pure numpy).

Kokoro speaks every segment as a whole utterance: about 0.33 s of silence before its first sound
and 0.45-0.6 s after its last. At a stream's start that silence only delays the first word; between
two segments of one request it adds a pause no text asked for. The cut is made on the decoded
samples, never by shortening the model's input: capping the leading boundary token before the
decoder shortened the first phonemes and raised the word error rate.

Silence is relative to the segment's own level: a 10 ms window whose peak lies more than
``SILENCE_DB`` below the segment's loudest window. Kokoro's silence lies 90 dB and more below its
speech, its softest sounds (a final fricative, a breathy onset) within 50 dB, so the cut falls in
the silence. Audio with no such window at an edge keeps that edge whole: the untrained model's
noise, a tone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from tts_container.segmenter import CLAUSE_END, CLOSERS, SENTENCE_END

WINDOW_S = 0.010
SILENCE_DB = -50.0  # below the segment's loudest window
# Kept before the first sound of a request's audio: enough that a player's first buffer does not
# start on a clipped onset, short enough that the first word comes at once.
STREAM_LEAD_S = 0.04
# Kept before the first sound of a later segment (the previous segment's pause comes before it).
ONSET_S = 0.03
# Kept after the last sound of a request's audio: the decay of its last phoneme, no more.
STREAM_TAIL_S = 0.05
# Kept after an inner segment, by the punctuation it ends on: about the pause Kokoro itself makes
# there when it speaks the whole text in one forward (after a full stop 450-510 ms, after a comma
# 70-410 ms), so a text split into segments sounds like the text spoken whole; a cut between two
# words (the short first segment) gets a phrase's short breath.
SENTENCE_PAUSE_S = 0.45
CLAUSE_PAUSE_S = 0.20
WORD_PAUSE_S = 0.10


@dataclass(frozen=True)
class Edges:
    """How much silence a segment keeps before its first sound and after its last."""

    lead_s: float
    tail_s: float


@runtime_checkable
class Edged(Protocol):
    """A segment that knows where it sits in its request (Kokoro's pieces do)."""

    @property
    def edges(self) -> Edges: ...


def pause_after(text: str) -> float:
    """The pause the punctuation ``text`` (words or phonemes) ends on asks for."""
    last = text.rstrip().rstrip(CLOSERS)[-1:]
    if last and last in SENTENCE_END:
        return SENTENCE_PAUSE_S
    if last and last in CLAUSE_END:
        return CLAUSE_PAUSE_S
    return WORD_PAUSE_S


def segment_edges(text: str, *, opens: bool, closes: bool) -> Edges:
    """The edges of a segment of ``text`` that opens and/or closes its request's audio."""
    return Edges(
        lead_s=STREAM_LEAD_S if opens else ONSET_S,
        tail_s=STREAM_TAIL_S if closes else pause_after(text),
    )


def trim_silence(audio: npt.NDArray[Any], sample_rate: int, edges: Edges) -> npt.NDArray[Any]:
    """``audio`` (mono, float or int) with at most ``edges`` of silence before its first sound and
    after its last, in whole windows; ``audio`` itself where nothing is cut."""
    window = max(1, round(WINDOW_S * sample_rate))
    frames = len(audio) // window
    if frames == 0:
        return audio
    envelope = np.abs(audio[: frames * window].astype(np.float64)).reshape(frames, window).max(1)
    peak = float(envelope.max())
    loud = np.flatnonzero(envelope > peak * 10 ** (SILENCE_DB / 20))
    if peak <= 0 or loud.size == 0:
        return audio  # all silence: nothing to measure against
    start = max(0, int(loud[0]) * window - round(edges.lead_s * sample_rate))
    end = min(len(audio), (int(loud[-1]) + 1) * window + round(edges.tail_s * sample_rate))
    if start == 0 and end == len(audio):
        return audio
    return audio[start:end]


def for_stream(audio: npt.NDArray[Any], segment: object, sample_rate: int) -> npt.NDArray[Any]:
    """A segment's audio as it leaves the engine for the stream: trimmed to its edges where the
    segment has them; whole where it has none (the synthetic engine's tone, a fixed length)."""
    if isinstance(segment, Edged):
        return trim_silence(audio, sample_rate, segment.edges)
    return audio
