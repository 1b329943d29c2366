"""An offline speech recognizer for the intelligibility check: pocketsphinx's bundled en-us model.

Installed with the `quality` extra; imported only when a run asks for transcripts. It runs after a
rung, never while requests are timed. Audio is resampled to the model's 16 kHz by cutting or padding
its spectrum (band-limited, so 24 kHz speech does not alias), and dithered by about one quantum:
pocketsphinx reads exact digital zeros as a word, where any real microphone would hear noise.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

MODEL_RATE = 16000
DITHER = 1.0  # standard deviation, in int16 quanta


@functools.cache
def decoder() -> Any:
    """pocketsphinx with its bundled en-us model, loaded once; a missing extra is one line."""
    try:
        from pocketsphinx import Decoder
    except ImportError as exc:
        raise InputError(
            f"{both_flags('--wer-sample')} needs pocketsphinx: expected it installed "
            "(pip install 'pytest-tts-scaling[quality]')"
        ) from exc
    return Decoder(samprate=MODEL_RATE, loglevel="FATAL")


def resample(samples: npt.ArrayLike, sample_rate: int, target_rate: int = MODEL_RATE) -> np.ndarray:
    """Band-limited resampling of a mono signal (float samples in int16 units)."""
    import numpy as np

    signal = np.asarray(samples, dtype=np.float64)
    if sample_rate <= 0:
        raise InputError(f"sample_rate: expected a positive rate in Hz, got {sample_rate}")
    if sample_rate == target_rate or signal.size == 0:
        return signal
    length = round(signal.size * target_rate / sample_rate)
    spectrum = np.fft.rfft(signal)
    bins = length // 2 + 1
    kept = np.zeros(bins, dtype=complex)
    kept[: min(bins, spectrum.size)] = spectrum[:bins]
    return np.fft.irfft(kept, n=length) * (length / signal.size)


def transcribe(samples: npt.ArrayLike, sample_rate: int) -> str:
    """The words pocketsphinx hears in mono 16-bit samples (int16, or floats in int16 units)."""
    import numpy as np

    signal = resample(samples, sample_rate)
    if signal.size == 0:
        return ""
    dither = np.random.default_rng(0).normal(0.0, DITHER, signal.size)
    pcm = np.clip(np.rint(signal + dither), -32768, 32767).astype("<i2")
    recognizer = decoder()
    recognizer.start_utt()
    recognizer.process_raw(pcm.tobytes(), full_utt=True)
    recognizer.end_utt()
    hypothesis = recognizer.hyp()
    return "" if hypothesis is None else str(hypothesis.hypstr)
