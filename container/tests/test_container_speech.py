"""Proof that the audio is right, with the trained model: the conversion against the original
export, the whole container path transcribed, scheduling and batching changing no audio (e2e)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from container_fakes import post, running
from speech_checks import (
    FRAME_SAMPLES,
    mel_correlation,
    onnx_session,
    onnx_speak,
    torch_speak,
    tts_serve,
)
from tts_container import trained_model
from tts_container.app import create_app
from tts_container.engine import KokoroEngine, KokoroPiece, synthesize_all
from tts_container.forced_durations import ForcedDurations
from tts_container.metrics import MetricsLog
from tts_container.onnx_engine import OnnxKokoroEngine
from tts_container.request import SynthesisRequest
from tts_container.settings import UNTRAINED_FORCED_LABEL, UNTRAINED_LABEL, Settings

from pytest_tts_scaling.core.audio import corpus_word_error_rate, word_edits
from pytest_tts_scaling.load.recognizer import transcribe
from pytest_tts_scaling.load.scenario import load_scenario, resolve
from pytest_tts_scaling.load.workload import Workload

# Plain sentences of common words (pocketsphinx's general English model hears those best).
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back when you get home tonight.",
    "The weather today is sunny and warm.",
    "I would like a cup of coffee with milk.",
    "Our train leaves the station at seven in the morning.",
    "She opened the window and looked at the garden.",
    "We need to buy bread, eggs and some fresh fruit.",
    "The meeting has been moved to next Tuesday.",
    "Turn left at the next corner and walk two blocks.",
    "Thank you very much for your help yesterday.",
    "My brother plays the guitar in a small band.",
    "The children went to the park after school.",
]
VOICE = "jm_kumo"
REQUEST_TIMEOUT_S = 120.0


@pytest.fixture
def no_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vocoder's random phase and noise held at zero (the export has neither)."""
    import torch

    monkeypatch.setattr(torch, "rand", lambda *size, **kw: torch.zeros(*size, **kw))
    monkeypatch.setattr(torch, "randn_like", lambda x, **kw: torch.zeros_like(x, **kw))


@pytest.fixture(scope="module")
def engine(trained_model_cache: Path) -> KokoroEngine:
    """The engine as served: the decoder in bfloat16 where this CPU has it natively."""
    return KokoroEngine.load(Settings(cache_dir=trained_model_cache, device="cpu"))


@pytest.fixture(scope="module")
def float32_engine(trained_model_cache: Path) -> KokoroEngine:
    return KokoroEngine.load(
        Settings(cache_dir=trained_model_cache, device="cpu", precision="float32")
    )


def test_the_conversion_speaks_like_the_export(
    float32_engine: KokoroEngine, no_noise: None
) -> None:
    """Same tokens, voice and speed: durations within one frame for >= 95 % of tokens, and with
    the export's durations forced, log-mel correlation >= 0.98 (float32 throughout)."""
    engine = float32_engine
    parts, voices_path = trained_model.locate_package_files()
    session = onnx_session(trained_model.assemble_export(parts))
    with np.load(voices_path) as voices:
        pack = voices[VOICE]
    tokens = close = 0
    for text in SENTENCES[:3]:
        ids = [engine._vocab[p] for p in engine._g2p(text) if p in engine._vocab]
        style = pack[len(ids) - 1]
        reference, reference_durations = onnx_speak(session, ids, style)
        _, durations = torch_speak(engine._model, ids, style)
        assert len(durations) == len(reference_durations) == len(ids) + 2
        tokens += len(durations)
        close += int(np.sum(np.abs(durations - reference_durations) <= 1))
        forced, _ = torch_speak(engine._model, ids, style, durations=reference_durations)
        assert abs(len(forced) - len(reference)) <= FRAME_SAMPLES
        correlation = mel_correlation(forced, reference)
        assert correlation >= 0.98, (text, correlation)
    assert close / tokens >= 0.95, (close, tokens)


@pytest.fixture(scope="module")
def onnx_engine() -> OnnxKokoroEngine:
    return OnnxKokoroEngine.load(Settings(engine="onnx", device="cpu"))


def test_the_onnx_engine_speaks_like_the_torch_path(
    float32_engine: KokoroEngine, onnx_engine: OnnxKokoroEngine, no_noise: None
) -> None:
    """ENGINE=onnx against the float32 torch path, as the conversion test holds the export: the
    engine's answer is the export's for the same tokens, voice and speed (its durations read from
    the graph), whose durations lie within one frame of torch's for >= 95 % of tokens; torch with
    those durations forced speaks it at a log-mel correlation >= 0.98."""
    parts, _ = trained_model.locate_package_files()
    session = onnx_session(trained_model.assemble_export(parts))
    pack = float32_engine._voice_packs[VOICE].numpy()
    tokens = close = 0
    for text in SENTENCES[:3]:
        phonemes = "".join(p for p in onnx_engine._g2p(text) if p in onnx_engine._vocab)
        [audio] = onnx_engine.synthesize([KokoroPiece(phonemes, VOICE, 1.0)])
        ids = [onnx_engine._vocab[p] for p in phonemes]
        graph_audio, graph_durations = onnx_speak(session, ids, pack[len(ids) - 1])
        assert len(audio) == len(graph_audio), text
        assert mel_correlation(audio, graph_audio) >= 0.999, text
        _, durations = torch_speak(float32_engine._model, ids, pack[len(ids) - 1])
        assert len(durations) == len(graph_durations) == len(ids) + 2
        tokens += len(durations)
        close += int(np.sum(np.abs(durations - graph_durations) <= 1))
        forced, _ = torch_speak(
            float32_engine._model, ids, pack[len(ids) - 1], durations=graph_durations
        )
        assert abs(len(forced) - len(audio)) <= FRAME_SAMPLES
        correlation = mel_correlation(forced, audio)
        print(f"{text!r}: log-mel correlation with torch {correlation:.4f}")
        assert correlation >= 0.98, (text, correlation)
    assert close / tokens >= 0.95, (close, tokens)


def test_a_bfloat16_decoder_speaks_like_the_float32_one(
    float32_engine: KokoroEngine, trained_model_cache: Path, no_noise: None
) -> None:
    """Durations stay float32, so the audio keeps its length to the sample; the decoder's speech
    keeps a log-mel correlation >= 0.99 with the float32 decoder's."""
    bfloat16 = KokoroEngine.load(
        Settings(cache_dir=trained_model_cache, device="cpu", precision="bfloat16")
    )
    pack = float32_engine._voice_packs[VOICE].numpy()
    for text in SENTENCES[:3]:
        ids = [
            float32_engine._vocab[p]
            for p in float32_engine._g2p(text)
            if p in float32_engine._vocab
        ]
        style = pack[len(ids) - 1]
        reference, reference_durations = torch_speak(float32_engine._model, ids, style)
        audio, durations = torch_speak(bfloat16._model, ids, style)
        assert np.array_equal(durations, reference_durations), text
        assert len(audio) == len(reference), text
        correlation = mel_correlation(audio, reference)
        print(f"{text!r}: log-mel correlation {correlation:.4f}")
        assert correlation >= 0.99, (text, correlation)


def _speak_over_http(url: str, voice: str) -> tuple[str, list[tuple[str, str]]]:
    """The weights and engine /ping names (``weights/engine``), and each sentence's transcript."""
    pairs = []
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        ping = client.get(url + "/ping").headers
        weights = f"{ping['x-tts-weights']}/{ping['x-tts-engine']}"
        for text in SENTENCES:
            response = client.post(url + "/invocations", json={"text": text, "voice": voice})
            assert response.status_code == 200, response.text
            samples = np.frombuffer(response.content, dtype="<i2")
            pairs.append((text, transcribe(samples, 24000)))
    return weights, pairs


def test_the_container_path_is_intelligible_and_the_untrained_model_is_not(
    trained_model_cache: Path, dev_model_cache: Path, tmp_path: Path
) -> None:
    """Twelve sentences through segmenting, streaming and PCM over HTTP, transcribed offline: the
    trained model on torch, on ONNX Runtime (auto's choice here: within 0.05 of torch's word
    error rate), and the untrained model."""
    env = {"TTS_CACHE_DIR": str(trained_model_cache), "ENGINE": "torch"}
    with tts_serve(env, tmp_path / "trained.log") as url:
        weights, trained = _speak_over_http(url, VOICE)
    assert weights == "trained (int8-derived v1.0)/torch"
    trained_wer = corpus_word_error_rate(trained)
    with tts_serve({"TTS_CACHE_DIR": str(trained_model_cache)}, tmp_path / "onnx.log") as url:
        weights, onnx = _speak_over_http(url, VOICE)
    assert weights == "trained (int8-derived v1.0)/onnx"
    onnx_wer = corpus_word_error_rate(onnx)
    env = {"TTS_CACHE_DIR": str(dev_model_cache), "WEIGHTS": "untrained"}
    with tts_serve(env, tmp_path / "untrained.log") as url:
        weights, untrained = _speak_over_http(url, "af_heart")
    assert weights == "untrained (development)/torch"
    untrained_wer = corpus_word_error_rate(untrained)
    print(
        f"WER trained: torch {trained_wer:.3f}, onnx {onnx_wer:.3f}; untrained {untrained_wer:.3f}"
    )
    assert trained_wer is not None
    assert trained_wer <= 0.40, trained
    assert onnx_wer is not None
    assert onnx_wer <= trained_wer + 0.05, (onnx, trained)
    assert untrained_wer is not None
    assert untrained_wer >= 0.9, untrained


def _serve(
    engine: KokoroEngine | OnnxKokoroEngine, texts: list[str], tmp_path: Path, **settings: Any
) -> list[Any]:
    """``texts`` sent at once through the app; each answer's samples, in order."""
    app = create_app(
        Settings(cache_dir=tmp_path, **settings),
        engine_factory=lambda _settings: engine,
        metrics=MetricsLog("m", stream=io.StringIO()),
    )

    async def scenario() -> list[Any]:
        async with running(app, timeout_s=REQUEST_TIMEOUT_S):
            payloads = [{"text": t, "voice": VOICE} for t in texts]
            results = await asyncio.gather(
                *(post(app, p, timeout_s=REQUEST_TIMEOUT_S) for p in payloads)
            )
        assert [r.status for r in results] == [200] * len(texts)
        return [np.frombuffer(r.body, dtype="<i2").astype(np.float64) for r in results]

    return asyncio.run(scenario())


@pytest.mark.parametrize("engine_name", ["engine", "onnx_engine"])
def test_scheduling_and_batching_change_no_audio(
    engine_name: str, request: pytest.FixtureRequest, no_noise: None, tmp_path: Path
) -> None:
    """The same requests alone, under fifo, under edf and batched: the same durations, log-mel
    correlation >= 0.99 with the lone answer, the same transcript but for one word (a batch's
    composition follows arrival timing, and on a busy machine a padded forward's last bits can
    tip the recognizer between two near words: "next tools" against "next goals"). On torch and
    on ONNX Runtime (whose batch runs its segments one by one)."""
    engine = request.getfixturevalue(engine_name)
    texts = [SENTENCES[2], SENTENCES[7], SENTENCES[9]]  # two segments each
    alone = [_serve(engine, [text], tmp_path)[0] for text in texts]
    runs = {
        "fifo": _serve(engine, texts, tmp_path, scheduler="fifo"),
        "edf": _serve(engine, texts, tmp_path, scheduler="edf", batch_max=1),
        "batch": _serve(engine, texts, tmp_path, scheduler="edf", batch_max=3, batch_wait_ms=300),
    }
    heard = [transcribe(samples, 24000) for samples in alone]
    for name, answers in runs.items():
        for i, samples in enumerate(answers):
            assert len(samples) == len(alone[i]), (name, i)
            correlation = mel_correlation(samples / 32768, alone[i] / 32768)
            assert correlation >= 0.99, (name, i, correlation)
            assert word_edits(heard[i], transcribe(samples, 24000))[0] <= 1, (name, i)


SPLIT_TEXTS = [
    "The weather today is sunny and warm. We could walk to the park and sit by the lake.",
    "Thanks for calling. Please hold while we connect you to the next available agent.",
    "Turn left at the next intersection, then continue for two hundred meters.",
    "Sorry, I did not catch that. Could you say it again a little more slowly?",
]


def test_segmenting_adds_no_speech_time(engine: KokoroEngine, no_noise: None) -> None:
    """A text split into segments (the first one short) lasts within 10 % of the same text spoken
    in one forward: inner segment edges keep only the pause their punctuation asks for."""
    for text in SPLIT_TEXTS:
        request = SynthesisRequest(request_id="split", text=text, voice=VOICE)
        pieces = list(engine.pieces(request))
        assert len(pieces) >= 2, text
        assert len(pieces[0].phonemes.split()) <= engine.first_segment_words
        split = sum(len(audio) for audio in synthesize_all(engine, request))
        phonemes = "".join(p for p in engine._g2p(text) if p in engine._vocab)
        [whole] = engine.synthesize([KokoroPiece(phonemes, VOICE, 1.0)])
        assert abs(split - len(whole)) <= 0.10 * len(whole), (text, split, len(whole))


def test_a_text_within_the_first_segment_is_not_split(engine: KokoroEngine) -> None:
    request = SynthesisRequest(request_id="short", text="Hello world, this is a test.", voice=VOICE)
    assert len(list(engine.pieces(request))) == 1


RECORDED_DURATIONS = Path(__file__).resolve().parents[2] / "benchmarks/data/trained-durations.json"


def _segment_samples(engine: KokoroEngine, text: str, voice: str) -> list[int]:
    """Samples the decoder computes for each segment of ``text`` (no edge trimmed)."""
    request = SynthesisRequest(request_id="length", text=text, voice=voice)
    pieces = [dataclasses.replace(p, opens=True, closes=True) for p in engine.pieces(request)]
    return [len(engine.synthesize([piece])[0]) for piece in pieces]


def test_forced_trained_durations_give_the_untrained_model_the_trained_length(
    engine: KokoroEngine, dev_model_cache: Path, no_noise: None
) -> None:
    """FORCE_DURATIONS with the recorded file: each segment of the workload's texts lasts, in the
    untrained model, what it lasts in the trained model (within 1 % and a frame of rounding);
    without forcing the segments are off by more than 10 % on average; a text the file lacks runs
    on the untrained model's own durations and is counted."""
    settings = Settings(
        cache_dir=dev_model_cache,
        weights="untrained",
        device="cpu",
        force_durations=RECORDED_DURATIONS,
    )
    forced = KokoroEngine.load(settings)
    assert forced.weights_label == UNTRAINED_FORCED_LABEL == settings.weights_label
    durations = forced.forced
    assert isinstance(durations, ForcedDurations)
    own = KokoroEngine(
        forced._model, forced._voice_packs, forced._g2p, weights_label=UNTRAINED_LABEL
    )
    workload = Workload.from_scenario(load_scenario(resolve("kokoro-82m", [])), model="kokoro-82m")
    own_errors = []
    for text, voice in [(workload.texts[i], workload.voice_for(i)) for i in (0, 1, 2)]:
        trained = _segment_samples(engine, text, voice)
        with_forced = _segment_samples(forced, text, voice)
        without = _segment_samples(own, text, voice)
        print(
            f"{text!r}: samples per segment: trained {trained}, forced {with_forced}, "
            f"own durations {without}"
        )
        for t, f, o in zip(trained, with_forced, without, strict=True):
            assert abs(f - t) <= 0.01 * t + FRAME_SAMPLES, (text, trained, with_forced)
            own_errors.append(abs(o - t) / t)
        assert abs(sum(with_forced) - sum(trained)) <= 0.01 * sum(trained)
    print(f"own durations: mean segment length error {np.mean(own_errors):.1%}")
    assert np.mean(own_errors) > 0.10, own_errors
    assert durations.missed == 0, "the recorded file lacks a segment of the workload"
    assert durations.forced == len(own_errors)

    unrecorded = "Zebras quietly juggle seventeen violet umbrellas."
    assert _segment_samples(forced, unrecorded, "af_heart") == _segment_samples(
        own, unrecorded, "af_heart"
    )
    assert durations.missed == 1
    assert durations.headers()["X-TTS-Durations-Missed"] == "1"
