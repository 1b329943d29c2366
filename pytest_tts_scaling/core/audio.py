"""What an answer's audio says, judged against the endpoint's own answers: pure, no I/O.

An answer's levels are the peak of each chunk as it arrived, and its floor the quietest 10 ms
of it. The answers at N=1 are the reference (:class:`AudioReference`): each text's audio seconds
and the endpoint's silence level. A later answer more than TOLERANCE shorter than its text's
reference is `audio_short`; one that never rises above the silence level is `audio_silent`. No
absolute level is assumed: an endpoint whose reference answers never rise above their own floor
(a constant tone, all zeros) has nothing to be silent against, and keeps its verdicts.

Word error rate compares a transcript with the text that was asked for, after both are reduced to
lower-case words (punctuation is how a text is written, not what it says).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np

from pytest_tts_scaling.core.schema import AudioReferenceSummary

if TYPE_CHECKING:
    from pytest_tts_scaling.core.records import RequestRecord

AUDIO_SHORT = "audio_short"
AUDIO_SILENT = "audio_silent"
AUDIO_ERRORS = frozenset({AUDIO_SHORT, AUDIO_SILENT})
# An answer this much shorter than its text's answer at N=1 was cut (Kokoro's durations are
# deterministic for a text, voice and speed; a resampled or re-chunked answer is not 10% shorter).
TOLERANCE = 0.10
FRAME_S = 0.010
# Audible: above twice the silence level and 32 quanta (-60 dBFS) over it, so dither and a noise
# floor stay silent.
MARGIN_QUANTA = 32

TextKey = tuple[str | None, str | None]  # (text, voice)


def levels(pcm: bytes | bytearray, chunk_bytes: Sequence[int], frame: int) -> tuple[list[int], int]:
    """Peak |sample| of each chunk of 16-bit little-endian audio, and the quietest `frame`-sample
    frame's peak (the whole answer's where it is shorter than one frame).

    `chunk_bytes`: payload bytes per chunk in arrival order; a sample split across two chunks
    counts in the one its last byte came in. Vectorized: it runs on the event loop as each
    request ends (about 0.1 ms for 5 s of audio).
    """
    samples = np.abs(np.frombuffer(pcm, dtype="<i2", count=len(pcm) // 2).astype(np.int32))
    if samples.size == 0:
        return [0] * len(chunk_bytes), 0
    ends = np.minimum(np.cumsum(np.asarray(chunk_bytes, dtype=np.int64)) // 2, samples.size)
    starts = np.concatenate(([0], ends[:-1]))
    peaks = np.zeros(len(chunk_bytes), dtype=np.int64)
    filled = ends > starts
    if filled.any():
        peaks[filled] = np.maximum.reduceat(samples, starts[filled])
    whole = samples.size // frame
    floor = (
        samples.max() if whole == 0 else samples[: whole * frame].reshape(whole, frame).max(1).min()
    )
    return peaks.tolist(), int(floor)


def peak_rises(pcm: bytes | bytearray, frame: int = 240) -> list[tuple[int, int]]:
    """(sample index, |sample|) wherever the answer's running peak first reaches a new level, in
    order: the first sample above any threshold is the first rise above it, so the audible
    start can be found once the silence level is known (after the N=1 rung), without the audio.

    Runs as each request ends: only the `frame`-sample frames whose peak rises above every frame
    before them can hold a rise, and the running peak over those frames alone, in order, is the
    answer's own there (about 0.2 ms for 3 s of audio).
    """
    samples = np.abs(np.frombuffer(pcm, dtype="<i2", count=len(pcm) // 2).astype(np.int32))
    if samples.size == 0:
        return []
    starts = np.arange(0, samples.size, frame)
    peaks = np.maximum.reduceat(samples, starts)
    before = np.concatenate(([-1], np.maximum.accumulate(peaks)[:-1]))
    rising = starts[peaks > before]
    index = (rising[:, None] + np.arange(frame)).ravel()
    index = index[index < samples.size]
    running = np.maximum.accumulate(samples[index])
    rises = index[np.diff(running, prepend=-1) > 0]
    return list(zip(rises.tolist(), samples[rises].tolist(), strict=True))


def audible_threshold(silence_level: int) -> int:
    return 2 * silence_level + MARGIN_QUANTA


@dataclass(frozen=True)
class AudioReference:
    """The endpoint's own answers at N=1: audio seconds per (text, voice), and its silence."""

    seconds: dict[TextKey, float]
    silence_level: int
    # Whether any reference answer rose above the silence level: if none did, silence cannot be
    # told from speech, and no answer is audible or silent.
    audible: bool
    tolerance: float = TOLERANCE

    @classmethod
    def from_answers(
        cls, answers: Iterable[tuple[TextKey, RequestRecord]]
    ) -> AudioReference | None:
        """From the delivered answers at N=1 that carried levels; None when there were none.

        A text whose answers at N=1 already differ by more than the tolerance (an endpoint whose
        durations are drawn, not determined by the text) has no reference length: its answers
        are never `audio_short`.
        """
        by_key: dict[TextKey, list[float]] = {}
        floors: list[int] = []
        peaks: list[int] = []
        for key, record in answers:
            if record.status != "ok" or record.audio_floor is None or record.hung_up:
                continue
            by_key.setdefault(key, []).append(record.audio_s)
            floors.append(record.audio_floor)
            peaks.extend(record.chunk_peaks)
        if not floors:
            return None
        level = min(floors)
        return cls(
            seconds={
                key: statistics.median(values)
                for key, values in by_key.items()
                if min(values) >= (1 - TOLERANCE) * max(values)
            },
            silence_level=level,
            audible=max(peaks, default=0) > audible_threshold(level),
        )

    def summary(self) -> AudioReferenceSummary:
        return AudioReferenceSummary(
            texts=len(self.seconds),
            silence_level=self.silence_level,
            audible=self.audible,
            tolerance=self.tolerance,
        )

    def audible_ms(self, record: RequestRecord) -> float | None:
        """When the first chunk above the silence level arrived, from the request's start."""
        if not self.audible or record.ttfab_ms is None:
            return None
        threshold = audible_threshold(self.silence_level)
        arrived = accumulate(record.gaps_ms, initial=record.ttfab_ms)
        return next(
            (at for at, p in zip(arrived, record.chunk_peaks, strict=False) if p > threshold), None
        )

    def speech_ms(self, record: RequestRecord) -> float | None:
        """When the first audible sample plays, from the request's start (the `audible` clock)."""
        if not self.audible:
            return None
        threshold = audible_threshold(self.silence_level)
        return next((at for level, at in record.peak_rises if level > threshold), None)

    def verdict(self, key: TextKey, record: RequestRecord) -> str | None:
        """`audio_short`, `audio_silent`, or None for an answer that passes (or is not judged: a
        hung-up answer is short, and may end before its speech, by the listener's choice)."""
        if record.status != "ok" or record.audio_floor is None or record.hung_up:
            return None
        reference_s = self.seconds.get(key)
        if reference_s is not None and record.audio_s < (1 - self.tolerance) * reference_s:
            return AUDIO_SHORT
        if self.audible and self.audible_ms(record) is None:
            return AUDIO_SILENT
        return None

    def judged(self, key: TextKey, record: RequestRecord, *, is_reference: bool) -> RequestRecord:
        """The record with its audible times and, unless it is a reference answer, its verdict."""
        verdict = None if is_reference else self.verdict(key, record)
        if verdict is not None:
            return replace(record, status="error", error_code=verdict, audible_ms=None)
        return replace(record, audible_ms=self.audible_ms(record), speech_ms=self.speech_ms(record))


_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def words(text: str) -> list[str]:
    """The words of a text: lower case, punctuation dropped, inner apostrophes kept (don't)."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def word_edits(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, reference words): Levenshtein over words."""
    ref, hyp = words(reference), words(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, ref_word in enumerate(ref, start=1):
        current = [i]
        for j, hyp_word in enumerate(hyp, start=1):
            current.append(
                min(
                    previous[j] + 1,
                    current[j - 1] + 1,
                    previous[j - 1] + (ref_word != hyp_word),
                )
            )
        previous = current
    return previous[-1], len(ref)


def corpus_word_error_rate(pairs: Iterable[tuple[str, str]]) -> float | None:
    """WER over many (reference, hypothesis) pairs: all edits over all reference words, so a long
    text weighs by its words, not as one answer; None when the references hold no words."""
    edits = count = 0
    for reference, hypothesis in pairs:
        e, n = word_edits(reference, hypothesis)
        edits += e
        count += n
    return edits / count if count else None


def judge_answers(
    reference: AudioReference | None,
    concurrency: int,
    records: Sequence[RequestRecord],
    keys: Mapping[str, TextKey],
) -> tuple[list[RequestRecord], AudioReference | None]:
    """A rung's records judged against the reference, and the reference: the first rung at N=1
    makes it from its own answers (which it then does not judge); before it, nothing is judged.

    `keys`: request_id -> (text, voice) of what was sent.
    """
    pairs = [(keys.get(r.request_id, (None, None)), r) for r in records]
    is_reference = reference is None and concurrency == 1
    if is_reference:
        reference = AudioReference.from_answers(pairs)
    if reference is None:
        return list(records), None
    return [reference.judged(k, r, is_reference=is_reference) for k, r in pairs], reference


def quality_failure(
    wer: float | None,
    wer_at_c1: float | None,
    max_wer: float | None,
    max_increase: float | None,
) -> bool:
    """Whether a rung's word error rate breaks the quality SLO: above `max_wer`, or above the
    same texts' WER at N=1 by more than `max_increase` (a limit that is None does not apply)."""
    if wer is None:
        return False
    if max_wer is not None and wer > max_wer:
        return True
    return max_increase is not None and wer_at_c1 is not None and wer - wer_at_c1 > max_increase
