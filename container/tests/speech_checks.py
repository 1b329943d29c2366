"""Comparing audio the way speech is heard: log-mel spectra (phase-blind), durations, transcripts.

torch's sine generator adds a random phase and noise the ONNX export lacks, and a duration may
round one frame differently, so waveforms are never compared sample by sample. `tts_serve` runs
the real server for the tests that go over HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from container_fake_server import free_port, stop_process, wait_until_ready

SAMPLE_RATE = 24000
N_FFT = 1024
HOP = 256
N_MELS = 80
FRAME_SAMPLES = 600  # one Kokoro duration frame: 25 ms at 24 kHz
START_TIMEOUT_S = 300.0  # a tts-serve start (it may convert the trained model first)
DURATION_OUTPUT = "/encoder/Clip_output_0"  # the export's per-token durations, clamped to >= 1


def _mel_filters(sample_rate: int = SAMPLE_RATE) -> npt.NDArray[np.float64]:
    def mel(hz: Any) -> Any:
        return 2595.0 * np.log10(1.0 + np.asarray(hz) / 700.0)

    def hz(m: Any) -> Any:
        return 700.0 * (10.0 ** (np.asarray(m) / 2595.0) - 1.0)

    edges = hz(np.linspace(mel(0.0), mel(sample_rate / 2), N_MELS + 2))
    bins = np.fft.rfftfreq(N_FFT, 1.0 / sample_rate)
    filters = np.zeros((N_MELS, bins.size))
    for i in range(N_MELS):
        low, centre, high = edges[i], edges[i + 1], edges[i + 2]
        rising = (bins - low) / (centre - low)
        falling = (high - bins) / (high - centre)
        filters[i] = np.clip(np.minimum(rising, falling), 0.0, None)
    return filters


def log_mel(samples: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """[frames, 80] log-mel spectrum of mono float samples at 24 kHz."""
    signal = np.asarray(samples, dtype=np.float64).reshape(-1)
    if signal.size < N_FFT:
        signal = np.pad(signal, (0, N_FFT - signal.size))
    frames = 1 + (signal.size - N_FFT) // HOP
    index = np.arange(N_FFT)[None, :] + HOP * np.arange(frames)[:, None]
    power = np.abs(np.fft.rfft(signal[index] * np.hanning(N_FFT), axis=1)) ** 2
    return np.log(power @ _mel_filters().T + 1e-6)


def mel_correlation(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Pearson correlation of two log-mel spectra, over the frames both have."""
    ma, mb = log_mel(a), log_mel(b)
    frames = min(len(ma), len(mb))
    return float(np.corrcoef(ma[:frames].ravel(), mb[:frames].ravel())[0, 1])


def onnx_session(export: bytes) -> Any:
    """An onnxruntime session of the export that also returns its durations."""
    import onnx
    import onnxruntime

    model = onnx.load_from_string(export)
    model.graph.output.append(
        onnx.helper.make_tensor_value_info(DURATION_OUTPUT, onnx.TensorProto.FLOAT, None)
    )
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options)


def onnx_speak(
    session: Any, ids: list[int], style: npt.NDArray[np.float32], speed: float = 1.0
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """The export's audio and per-token durations for token ids (without the boundary zeros)."""
    tokens = np.array([[0, *ids, 0]], dtype=np.int64)
    audio, durations = session.run(
        None,
        {
            "tokens": tokens,
            "style": style.reshape(1, 256).astype(np.float32),
            "speed": np.array([speed], dtype=np.float32),
        },
    )
    return audio.reshape(-1), np.asarray(durations).reshape(-1).astype(np.int64)


def torch_speak(
    model: Any, ids: list[int], style: Any, speed: float = 1.0, durations: Any = None
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """KModel's audio and durations, as the container's forward computes them, or with
    ``durations`` (one per token, boundaries included) forced in place of its own: the container's
    own forcing (`forward_tokens`, what ``FORCE_DURATIONS`` runs)."""
    import torch
    from tts_container.kokoro_batch import forward_tokens

    ref_s = torch.as_tensor(np.asarray(style, dtype=np.float32).reshape(1, 256))
    forced = None if durations is None else [[int(d) for d in durations]]
    with torch.inference_mode():
        [audio], [own] = forward_tokens(model, [ids], ref_s, [speed], forced)
    return audio.cpu().numpy().astype(np.float32), own.numpy().astype(np.int64)


@contextmanager
def tts_serve(env: dict[str, str], logs: Path) -> Iterator[str]:
    """``tts-serve`` on a free port with ``env``; its base URL once /ping answers 200."""
    port = free_port()
    executable = Path(sys.executable).with_name("tts-serve")
    full_env = {**os.environ, "DEVICE": "cpu", "PYTHONUNBUFFERED": "1", **env}
    full_env.pop("MODEL_DIR", None)
    with open(logs, "wb") as log:
        process = subprocess.Popen(
            [str(executable), "--port", str(port)], stdout=log, stderr=log, env=full_env
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, lambda: process.poll() is None, START_TIMEOUT_S, str(logs))
        yield url
    finally:
        stop_process(process)
