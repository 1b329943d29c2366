"""Kokoro's edge silence cut from the decoded audio: the pure trim, and the stream applying it."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from container_fakes import FakeEngine, post, running
from tts_container.app import create_app
from tts_container.engine import KokoroPiece
from tts_container.metrics import MetricsLog
from tts_container.request import SynthesisRequest
from tts_container.settings import Settings
from tts_container.synthetic import SyntheticEngine
from tts_container.trim import (
    CLAUSE_PAUSE_S,
    ONSET_S,
    SENTENCE_PAUSE_S,
    STREAM_LEAD_S,
    STREAM_TAIL_S,
    WORD_PAUSE_S,
    Edges,
    for_stream,
    pause_after,
    segment_edges,
    trim_silence,
)

RATE = 24000
WINDOW = 240  # samples in one 10 ms window


def utterance(lead_s: float = 0.33, speech_s: float = 1.0, trail_s: float = 0.45) -> np.ndarray:
    """Silence, a tone, silence: the shape of one Kokoro segment."""
    tone = 0.5 * np.sin(np.arange(round(speech_s * RATE)) * 0.2)
    silence = [np.zeros(round(s * RATE)) for s in (lead_s, trail_s)]
    return np.concatenate([silence[0], tone, silence[1]]).astype(np.float32)


def seconds(audio: np.ndarray) -> float:
    return len(audio) / RATE


class TestPauses:
    @pytest.mark.parametrize(
        ("text", "pause_s"),
        [
            ("ɐ tˈɛst.", SENTENCE_PAUSE_S),
            ("Is it?", SENTENCE_PAUSE_S),
            ('He said "no."', SENTENCE_PAUSE_S),
            ("wˈɜːld,", CLAUSE_PAUSE_S),
            ("first; ", CLAUSE_PAUSE_S),
            ("wˈɛn juː", WORD_PAUSE_S),
            ("", WORD_PAUSE_S),
        ],
    )
    def test_the_pause_follows_the_punctuation(self, text: str, pause_s: float) -> None:
        assert pause_after(text) == pause_s

    def test_a_sentence_end_pauses_longer_than_a_comma_and_a_comma_than_a_word(self) -> None:
        assert SENTENCE_PAUSE_S > CLAUSE_PAUSE_S > WORD_PAUSE_S > 0

    def test_the_stream_keeps_a_short_lead_and_tail_inner_edges_the_pause(self) -> None:
        assert segment_edges("ɐ.", opens=True, closes=True) == Edges(STREAM_LEAD_S, STREAM_TAIL_S)
        assert segment_edges("ɐ,", opens=True, closes=False) == Edges(STREAM_LEAD_S, CLAUSE_PAUSE_S)
        assert segment_edges("ɐ.", opens=False, closes=False) == Edges(ONSET_S, SENTENCE_PAUSE_S)
        assert segment_edges("ɐ.", opens=False, closes=True) == Edges(ONSET_S, STREAM_TAIL_S)
        assert STREAM_LEAD_S <= 0.05


class TestTrimSilence:
    def test_edges_keep_what_they_ask_for(self) -> None:
        trimmed = trim_silence(utterance(), RATE, Edges(lead_s=0.04, tail_s=0.2))
        assert seconds(trimmed) == pytest.approx(0.04 + 1.0 + 0.2, abs=0.011)
        loud = np.flatnonzero(np.abs(trimmed) > 0)
        assert loud[0] / RATE == pytest.approx(0.04, abs=0.011)

    def test_no_speech_is_cut(self) -> None:
        """Every sample above the silence survives, in order."""
        audio = utterance()
        trimmed = trim_silence(audio, RATE, Edges(0.0, 0.0))
        assert np.array_equal(trimmed[np.abs(trimmed) > 0], audio[np.abs(audio) > 0])

    def test_a_soft_onset_45_db_under_the_peak_is_kept(self) -> None:
        breath = np.full(round(0.05 * RATE), 0.5 * 10 ** (-45 / 20), dtype=np.float32)
        audio = np.concatenate([np.zeros(8000, np.float32), breath, utterance(0, 1.0, 0.4)])
        trimmed = trim_silence(audio, RATE, Edges(0.0, 0.0))
        assert seconds(trimmed) == pytest.approx(0.05 + 1.0, abs=0.011)

    def test_the_threshold_follows_the_audio_level(self) -> None:
        """A quiet answer is cut where a loud one is, and int16 where float is."""
        audio = utterance()
        edges = Edges(0.03, 0.3)
        loud = trim_silence(audio, RATE, edges)
        assert len(trim_silence(audio * 1e-3, RATE, edges)) == len(loud)
        assert len(trim_silence((audio * 30000).astype(np.int16), RATE, edges)) == len(loud)

    def test_audio_without_silence_is_kept_whole(self) -> None:
        """The untrained model's noise and the synthetic tone: nothing is quiet at their edges."""
        noise = np.random.default_rng(7).normal(0, 0.3, RATE).astype(np.float32)
        tone = np.sin(np.arange(RATE) * 0.05).astype(np.float32)
        for audio in (noise, tone, np.zeros(RATE, np.float32), np.ones(100, np.float32)):
            assert trim_silence(audio, RATE, Edges(0.0, 0.0)) is audio

    def test_edges_longer_than_the_silence_keep_it_all(self) -> None:
        audio = utterance(0.02, 1.0, 0.03)
        assert trim_silence(audio, RATE, Edges(0.5, 0.5)) is audio


class TestForStream:
    def test_kokoro_pieces_are_trimmed_by_their_place(self) -> None:
        first = for_stream(utterance(), KokoroPiece("ɐ,", "v", 1.0, True, False), RATE)
        inner = for_stream(utterance(), KokoroPiece("ɐ.", "v", 1.0, False, False), RATE)
        last = for_stream(utterance(), KokoroPiece("ɐ.", "v", 1.0, False, True), RATE)
        assert seconds(first) == pytest.approx(STREAM_LEAD_S + 1.0 + CLAUSE_PAUSE_S, abs=0.011)
        assert seconds(inner) == pytest.approx(ONSET_S + 1.0 + SENTENCE_PAUSE_S, abs=0.011)
        assert seconds(last) == pytest.approx(ONSET_S + 1.0 + STREAM_TAIL_S, abs=0.011)

    def test_the_synthetic_engines_segments_keep_their_length(self) -> None:
        """Its audio per segment is a setting the capacity figures rest on: never trimmed."""
        engine = SyntheticEngine(
            batch_base_s=0, segment_s=0, segment_audio_s=0.5, sleep=lambda _s: None
        )
        request = SynthesisRequest("s", text="One, two. Three four five six seven.", voice="v")
        for piece in engine.pieces(request):
            [audio] = engine.synthesize([piece])
            assert for_stream(audio, piece, RATE) is audio


class SilentEdgesEngine(FakeEngine):
    """Three Kokoro pieces, each decoded as 0.33 s of silence, 0.5 s of tone and 0.45 s of it."""

    def pieces(self, request: SynthesisRequest) -> Iterator[KokoroPiece]:  # type: ignore[override]
        self.requests.append(request)
        ends = ["ɐ,", "ɐ.", "ɐ."]
        for index, phonemes in enumerate(ends):
            yield KokoroPiece(phonemes, request.voice, 1.0, index == 0, index == len(ends) - 1)

    def synthesize(self, batch: Sequence[KokoroPiece]) -> list[np.ndarray]:  # type: ignore[override]
        return [utterance(0.33, 0.5, 0.45) for _ in batch]


def test_the_stream_sends_each_segment_trimmed(tmp_path: Path) -> None:
    """Through the app: the answer starts 40 ms before its first sound, its segments are joined
    by the pause of their punctuation, and it ends 50 ms after its last sound."""
    app = create_app(
        Settings(cache_dir=tmp_path, inference_workers=1),
        engine_factory=lambda _settings: SilentEdgesEngine(),
        metrics=MetricsLog("m", stream=io.StringIO()),
    )

    async def scenario() -> np.ndarray:
        async with running(app):
            result = await post(app, {"text": "a, b. c.", "voice": "af_heart"})
        assert result.status == 200
        return np.frombuffer(result.body, dtype="<i2")

    samples = asyncio.run(scenario())
    expected = (
        (STREAM_LEAD_S + 0.5 + CLAUSE_PAUSE_S)
        + (ONSET_S + 0.5 + SENTENCE_PAUSE_S)
        + (ONSET_S + 0.5 + STREAM_TAIL_S)
    )
    assert seconds(samples) == pytest.approx(expected, abs=0.03)
    sound = np.flatnonzero(np.abs(samples) > 0)
    assert sound[0] / RATE == pytest.approx(STREAM_LEAD_S, abs=0.011)
    assert (len(samples) - sound[-1]) / RATE == pytest.approx(STREAM_TAIL_S, abs=0.011)
