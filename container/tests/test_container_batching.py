"""A padded, masked batch through Kokoro's modules equals each sequence's own forward.

On CPU with the untrained development model (real architecture) and small inputs. The vocoder's
noise is zeroed in both runs: it is random per call, so only the same noise gives the same audio.
The untrained vocoder amplifies float rounding (its output peaks near 1e5, through an exp): the
masked path with one sequence already differs from kokoro's own by 0.1-0.4 % of the peak (packed
LSTMs, masked norms), so that is the tolerance against kokoro; padding adds under 0.1 %. The
decoder runs float32 here (bfloat16 rounding is coarser than these tolerances); a batch in
bfloat16 is held to the same speech in test_container_speech.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tts_container.engine import KokoroEngine, KokoroPiece
from tts_container.kokoro_batch import forward_batch
from tts_container.settings import Settings

# Different lengths, voices and speeds, so the batch pads tokens, frames and samples.
PIECES = [
    KokoroPiece("hˈɛloʊ wˈɜːld.", "af_heart", 1.0),
    KokoroPiece("ðɪs ɪz ɐ lˈɔŋɡɚ sˈɛɡmənt ʌv spˈiːtʃ, wɪð ɐ kˈɑːmə.", "am_adam", 1.0),
    KokoroPiece("jˈɛs.", "af_bella", 1.25),
]


@pytest.fixture(scope="module")
def engine(dev_model_cache: Path) -> KokoroEngine:
    settings = Settings(
        cache_dir=dev_model_cache, device="cpu", weights="untrained", precision="float32"
    )
    return KokoroEngine.load(settings)


@pytest.fixture
def no_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch, "rand", lambda *size, **kw: torch.zeros(*size, **kw))
    monkeypatch.setattr(torch, "randn_like", lambda x, **kw: torch.zeros_like(x, **kw))


def _masked_path(engine: KokoroEngine, pieces: list[KokoroPiece]) -> list[np.ndarray]:
    packs = [engine._voice_packs[p.voice] for p in pieces]
    audio = forward_batch(
        engine._model, [p.phonemes for p in pieces], packs, [p.speed for p in pieces]
    )
    return [a.numpy() for a in audio]


def test_a_batched_forward_equals_each_sequences_own_forward(
    engine: KokoroEngine, no_noise: None
) -> None:
    alone = [engine.synthesize([piece])[0] for piece in PIECES]  # kokoro's own path
    batched = engine.synthesize(PIECES)
    assert [b.shape for b in batched] == [a.shape for a in alone]
    for single, in_batch in zip(alone, batched, strict=True):
        peak = float(np.abs(single).max())
        assert peak > 0
        np.testing.assert_allclose(in_batch, single, rtol=0, atol=1e-2 * peak)


def test_padding_changes_an_output_by_less_than_rounding(
    engine: KokoroEngine, no_noise: None
) -> None:
    batched = _masked_path(engine, PIECES)
    for index, in_batch in enumerate(batched):
        (alone,) = _masked_path(engine, [PIECES[index]])
        assert in_batch.shape == alone.shape
        np.testing.assert_allclose(in_batch, alone, rtol=0, atol=1e-3 * np.abs(alone).max())


def test_the_masking_hooks_change_nothing_outside_a_batch(
    engine: KokoroEngine, no_noise: None
) -> None:
    before = engine.synthesize([PIECES[1]])[0]
    engine.synthesize(PIECES[:2])  # installs the hooks
    after = engine.synthesize([PIECES[1]])[0]
    np.testing.assert_array_equal(after, before)
