"""Intelligibility under load (opt-in, `--wer-sample K`): a few answers of each rung transcribed.

While a rung runs, the engine hands each delivered answer's audio to :meth:`QualityCheck.keeper`,
which keeps only the latest K of distinct texts (and, at N=1, one answer of every text: the
reference). After the rung, never on the timing path, those answers are transcribed offline
(load/recognizer.py) and the rung's word error rate is held against the N=1 answers of the same
texts: a rung whose WER is above `--max-wer`, or above N=1's by more than `--max-wer-increase`,
fails for `wer` like a rung above the latency SLO.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pytest_tts_scaling.core.audio import corpus_word_error_rate, quality_failure
from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.core.schema import Rung

# At N=1 one answer of each text is kept as the reference, up to this many texts.
MAX_REFERENCE_TEXTS = 64
Transcribe = Callable[[bytes, int], str]


@dataclass(frozen=True)
class Answer:
    request_id: str
    text: str
    audio: bytes
    sample_rate: int


def answer_of(record: RequestRecord, text: str | None, audio: bytes) -> Answer | None:
    """A delivered answer of 16-bit mono audio (the only kind the recognizer reads), else None."""
    if text is None or not record.chunk_peaks or record.audio_s <= 0:
        return None
    rate = round(record.audio_bytes / record.audio_s / 2)
    return Answer(record.request_id, text, audio, rate)


def pcm_transcriber() -> Transcribe:
    """pocketsphinx over 16-bit little-endian PCM bytes (imported only when a run asks, and
    loaded before the first rung, so a missing extra stops the run at once)."""
    import numpy as np

    from pytest_tts_scaling.load.recognizer import decoder, transcribe

    decoder()

    def run(audio: bytes, sample_rate: int) -> str:
        return transcribe(np.frombuffer(audio, dtype="<i2", count=len(audio) // 2), sample_rate)

    return run


@dataclass
class QualityCheck:
    sample: int
    max_wer: float | None
    max_increase: float | None
    transcribe: Transcribe = field(default_factory=pcm_transcriber)
    reference: dict[str, Answer] = field(default_factory=dict)
    _reference_heard: dict[str, str] = field(default_factory=dict)  # text -> its N=1 transcript

    def keeper(
        self, concurrency: int, texts: Mapping[str, str | None]
    ) -> tuple[Callable[[RequestRecord, bytes], None], dict[str, Answer]]:
        """The engine's `on_audio` for one rung, and what it keeps: the latest answer of each
        text, at most `sample` texts (the oldest text dropped), by text."""
        kept: dict[str, Answer] = {}
        is_reference = concurrency == 1 and not self.reference

        def keep(record: RequestRecord, audio: bytes) -> None:
            answer = answer_of(record, texts.get(record.request_id), audio)
            if answer is None:
                return
            if is_reference and len(self.reference) < MAX_REFERENCE_TEXTS:
                self.reference.setdefault(answer.text, answer)
            kept.pop(answer.text, None)
            kept[answer.text] = answer
            while len(kept) > self.sample:
                kept.pop(next(iter(kept)))

        return keep, kept

    def judge(self, rung: Rung, kept: Mapping[str, Answer], in_window: set[str]) -> Rung:
        """The rung with its WER, N=1's over the same texts, and a `wer` failure where the
        quality SLO does not hold (a rung that already failed keeps its reason)."""
        sampled = [
            a for a in kept.values() if a.request_id in in_window and a.text in self.reference
        ]
        if not sampled:
            return rung
        wer = corpus_word_error_rate((a.text, self._heard_in(a)) for a in sampled)
        at_c1 = corpus_word_error_rate((a.text, self._reference_heard_for(a.text)) for a in sampled)
        update: dict[str, object] = {"wer": wer, "wer_at_c1": at_c1, "wer_sampled": len(sampled)}
        if rung.meets_slo and quality_failure(wer, at_c1, self.max_wer, self.max_increase):
            update |= {"meets_slo": False, "fail_reason": "wer"}
        return rung.model_copy(update=update)

    def _heard_in(self, answer: Answer) -> str:
        return self.transcribe(answer.audio, answer.sample_rate)

    def _reference_heard_for(self, text: str) -> str:
        if text not in self._reference_heard:
            self._reference_heard[text] = self._heard_in(self.reference[text])
        return self._reference_heard[text]
