"""Japanese through the container: with lang_code "j" the text is read by misaki's Japanese G2P
and a jf voice speaks it over HTTP. No offline recognizer here hears Japanese, so the checks are
what can be measured: the phonemes are Japanese ones, and the speech lasts as long as its morae
ask for, which the English reading of the same text (the wrong frontend) does not."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from speech_checks import tts_serve
from tts_container import trained_model
from tts_container.engine import KokoroEngine
from tts_container.g2p import (
    G2P,
    JAPANESE_INSTALL,
    japanese_frontend_missing,
    load_g2p,
    load_japanese_g2p,
)
from tts_container.model_files import packaged_config
from tts_container.request import SynthesisRequest

_missing_frontend = japanese_frontend_missing()
if _missing_frontend:
    pytest.skip(
        f"the Japanese frontend is not installed ({', '.join(_missing_frontend)}): "
        f"{JAPANESE_INSTALL}",
        allow_module_level=True,
    )
try:
    trained_model.locate_package_files()
except trained_model.TrainedModelError as _exc:
    pytest.skip(str(_exc), allow_module_level=True)

# Everyday sentences, written for this test (the scenario kokoro-82m-ja speaks others).
SENTENCES = [
    "今日はいい天気ですね。",
    "駅までの道を教えてください。",
    "コーヒーを一杯お願いします。",
    "お名前をお聞きしてもいいですか。",
]
VOICES = ["jf_alpha", "jf_nezumi", "jf_tebukuro", "jf_gongitsune"]
REQUEST_TIMEOUT_S = 180.0
SAMPLE_RATE = 24000
# Japanese is spoken at about 7 to 8 morae a second; a reading outside 4 to 16 is not this text.
SECONDS_PER_MORA = (1 / 16, 1 / 4)
LOUD_DB = -40.0  # below the answer's peak: the speech, without the silence at its edges
# Kokoro's Japanese phonemes (misaki's cutlet reading): five vowels, ɯ and ɨ for u.
JAPANESE_VOWELS = set("aieoɯɨ")
ENGLISH_ONLY = set("ˈˌɚæɛʌɪʊəɹ")
SMALL_KANA = set("ァィゥェォャュョヮ")


def morae(text: str) -> int:
    """Morae of ``text`` in OpenJTalk's katakana reading (a small kana joins the one before)."""
    import pyopenjtalk

    reading = pyopenjtalk.g2p(text, kana=True)
    return sum(1 for kana in reading if "ァ" <= kana <= "ヺ" or kana == "ー") - sum(
        1 for kana in reading if kana in SMALL_KANA
    )


def phoneme_morae(phonemes: str) -> int:
    """Morae in Kokoro's Japanese phonemes: vowels, long marks, geminates, moraic nasals."""
    return sum(1 for symbol in phonemes if symbol in JAPANESE_VOWELS or symbol in "ːʔɴŋ")


def speech_seconds(samples: np.ndarray) -> float:
    """Seconds from the first to the last 10 ms window within 40 dB of the peak."""
    window = SAMPLE_RATE // 100
    frames = len(samples) // window
    envelope = np.abs(samples[: frames * window]).reshape(frames, window).max(axis=1)
    loud = np.nonzero(envelope > envelope.max() * 10 ** (LOUD_DB / 20))[0]
    return float((loud[-1] - loud[0] + 1) * window / SAMPLE_RATE)


def speak(client: httpx.Client, url: str, payload: dict[str, str]) -> np.ndarray:
    response = client.post(url + "/invocations", json=payload)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.float64)


@pytest.fixture(scope="module")
def japanese_g2p() -> G2P:
    g2p = load_japanese_g2p()
    assert g2p is not None
    return g2p


def test_japanese_text_gets_japanese_phonemes(japanese_g2p: G2P) -> None:
    """Every vowel one of Japanese's five, no English stress, a mora for each of the reading's."""
    for text in SENTENCES:
        phonemes = japanese_g2p(text)
        vowels = set(re.sub(r"[^aeiouɯɨæɛʌɪʊəɚɑɔ]", "", phonemes))
        assert vowels, (text, phonemes)
        assert vowels <= JAPANESE_VOWELS, (text, phonemes)
        assert not set(phonemes) & ENGLISH_ONLY, (text, phonemes)
        assert phoneme_morae(phonemes) == pytest.approx(morae(text), rel=0.2), (text, phonemes)


def test_japanese_text_is_read_whole_then_segmented_and_a_voice_never_switches(
    japanese_g2p: G2P,
) -> None:
    """Two sentences without a space between them become two pieces of Japanese phonemes; the
    same text in a jf voice without lang_code goes to the English G2P."""
    import torch

    vocab = json.loads(packaged_config().read_text(encoding="utf-8"))["vocab"]
    pack = torch.zeros((510, 1, 256))  # pieces() only names the voice
    engine = KokoroEngine(
        SimpleNamespace(vocab=vocab),
        {"jf_alpha": pack, "jm_kumo": pack},
        load_g2p(prefer_misaki=False),
        japanese_g2p=japanese_g2p,
    )
    text = "お電話ありがとうございます。少々お待ちください。"
    japanese = list(engine.pieces(SynthesisRequest("ja", text, voice="jf_alpha", lang_code="j")))
    assert len(japanese) == 2, japanese
    assert all(set(p.phonemes) & JAPANESE_VOWELS for p in japanese), japanese
    assert not any(set(p.phonemes) & ENGLISH_ONLY for p in japanese), japanese
    english = list(engine.pieces(SynthesisRequest("en", text, voice="jf_alpha")))
    assert all(set(p.phonemes) & ENGLISH_ONLY for p in english), english


def test_a_japanese_request_speaks_japanese_with_the_jf_voices(
    trained_model_cache: Path, tmp_path: Path
) -> None:
    """lang_code "j" over HTTP: audible speech lasting 1/16 to 1/4 s per mora. The same text with
    the same voice but no lang_code is read as English (a jf voice does not switch the language)
    and lasts far longer than its morae allow: the check fails for the wrong frontend."""
    lengths = []
    with (
        tts_serve({"TTS_CACHE_DIR": str(trained_model_cache)}, tmp_path / "serve.log") as url,
        httpx.Client(timeout=REQUEST_TIMEOUT_S) as client,
    ):
        for text, voice in zip(SENTENCES, VOICES, strict=True):
            samples = speak(client, url, {"text": text, "voice": voice, "lang_code": "j"})
            rms = float(np.sqrt(np.mean(samples**2)))
            assert rms > 300, (text, voice, rms)  # int16: audible, not silence or a hiss
            per_mora = speech_seconds(samples) / morae(text)
            lengths.append((text, voice, round(per_mora, 3), round(rms)))
            assert SECONDS_PER_MORA[0] <= per_mora <= SECONDS_PER_MORA[1], lengths[-1]
        text = SENTENCES[0]
        english = speak(client, url, {"text": text, "voice": VOICES[0]})
        english_per_mora = speech_seconds(english) / morae(text)
    print(f"Japanese s/mora (text, voice, s, rms): {lengths}; read as English: {english_per_mora}")
    assert english_per_mora > SECONDS_PER_MORA[1], english_per_mora
