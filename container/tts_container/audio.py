"""Audio on the wire: s16le mono PCM, optionally behind a streaming WAV header."""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

BYTES_PER_SAMPLE = 2
STREAMING_SIZE = 0xFFFFFFFF  # RIFF and data sizes of a WAV whose length is not known up front


def pcm_content_type(sample_rate: int) -> str:
    return f"audio/pcm;rate={sample_rate};channels=1;encoding=s16le"


WAV_CONTENT_TYPE = "audio/wav"


def to_pcm16(samples: npt.NDArray[np.generic]) -> bytes:
    """Mono samples (float in [-1, 1], clipped, or int16) as s16le bytes."""
    array = np.asarray(samples).reshape(-1)
    if array.dtype == np.int16:
        return array.astype("<i2", copy=False).tobytes()
    if not np.issubdtype(array.dtype, np.floating):
        raise TypeError(f"expected float or int16 samples, got {array.dtype}")
    scaled = np.clip(np.nan_to_num(array.astype(np.float32)), -1.0, 1.0) * 32767.0
    return np.round(scaled).astype("<i2").tobytes()


def wav_header(sample_rate: int, channels: int = 1, bits_per_sample: int = 16) -> bytes:
    """A 44-byte PCM WAV header for a stream of unknown length (sizes 0xFFFFFFFF)."""
    block_align = channels * bits_per_sample // 8
    return (
        b"RIFF"
        + struct.pack("<I", STREAMING_SIZE)
        + b"WAVEfmt "
        + struct.pack(
            "<IHHIIHH",
            16,
            1,
            channels,
            sample_rate,
            sample_rate * block_align,
            block_align,
            bits_per_sample,
        )
        + b"data"
        + struct.pack("<I", STREAMING_SIZE)
    )


def audio_seconds(pcm_bytes: int, sample_rate: int) -> float:
    return pcm_bytes / (BYTES_PER_SAMPLE * sample_rate)
