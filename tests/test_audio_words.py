"""Word error rate (pure) and the offline recognizer on audio whose words are known: none."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pytest_tts_scaling.core.audio import corpus_word_error_rate, word_edits, words
from pytest_tts_scaling.optional import needs_extra


def test_words_ignore_case_and_punctuation() -> None:
    assert words("Hello, World! Don\u2019t stop.") == ["hello", "world", "don't", "stop"]


@pytest.mark.parametrize(
    ("reference", "hypothesis", "expected"),
    [
        ("the cat sat", "The cat, sat.", (0, 3)),
        ("the cat sat", "the bat sat", (1, 3)),
        ("the cat sat", "the sat", (1, 3)),
        ("the cat sat", "the cat sat down here", (2, 3)),
        ("the cat sat", "", (3, 3)),
        ("", "", (0, 0)),
        ("", "uh", (1, 0)),
        ("a b c d", "b c d a", (2, 4)),
    ],
)
def test_word_edits(reference: str, hypothesis: str, expected: tuple[int, int]) -> None:
    assert word_edits(reference, hypothesis) == expected


def test_corpus_rate_weighs_texts_by_their_words() -> None:
    pairs = [
        (
            "one two three four five six seven eight nine",
            "one two three four five six seven eight nine",
        ),
        ("yes", "no"),
    ]
    assert corpus_word_error_rate(pairs) == pytest.approx(1 / 10)
    assert corpus_word_error_rate([("", "")]) is None


def test_recognizer_hears_no_words_in_silence_or_a_tone() -> None:
    pytest.importorskip("pocketsphinx", reason=needs_extra("pocketsphinx"))
    from pytest_tts_scaling.load import recognizer

    assert recognizer.transcribe(np.zeros(24000, dtype=np.int16), 24000) == ""
    t = np.arange(2 * 24000) / 24000
    tone = 8000 * np.sin(2 * np.pi * 440 * t)
    assert len(recognizer.transcribe(tone, 24000).split()) <= 2
    assert recognizer.transcribe(np.array([], dtype=np.int16), 24000) == ""


def test_resampling_keeps_a_tone_and_its_level() -> None:
    from pytest_tts_scaling.load.recognizer import resample

    t = np.arange(24000) / 24000
    out = resample(1000 * np.sin(2 * np.pi * 440 * t), 24000)
    assert out.size == 16000
    peak = np.argmax(np.abs(np.fft.rfft(out)))
    assert peak == 440  # one-second signal: bin index is Hz
    assert np.abs(out).max() == pytest.approx(1000, rel=0.01)


def test_a_bad_rate_names_the_field() -> None:
    from pytest_tts_scaling.errors import InputError
    from pytest_tts_scaling.load.recognizer import resample

    with pytest.raises(InputError, match="sample_rate"):
        resample(np.zeros(10), 0)


def test_a_missing_recognizer_is_one_line_naming_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_tts_scaling.errors import InputError
    from pytest_tts_scaling.load import recognizer

    monkeypatch.setitem(sys.modules, "pocketsphinx", None)
    recognizer.decoder.cache_clear()
    try:
        with pytest.raises(InputError, match=r"--tts-wer-sample \(tts-bench: --wer-sample\) needs"):
            recognizer.decoder()
    finally:
        recognizer.decoder.cache_clear()
