"""How soon the container speaks and how long it speaks, against kokoro-onnx on the same texts.

For the trained Kokoro-82M (the container's default weights), voice jm_kumo, the first ``--texts``
workload texts (``scenarios/texts/assistant.txt``, about 14 words each), one request at a time
(N=1) over HTTP to ``tts-serve`` with its defaults, prints per server:

- lead: when the first audible sample lies in the answer's stream (ms, median and max), audible as
  the audio checks judge it: above twice the quietest 10 ms of the server's answers plus 32
  quanta (`pytest_tts_scaling.core.audio`);
- audio seconds per text (mean), and its ratio to kokoro-onnx's.

kokoro-onnx (0.6.1, ONNX Runtime, CPU, one thread) runs in process on the same int8 export the
container's trained weights are converted from, where it is installed (``pip install
kokoro-onnx==0.6.1``: the ``benchmarks`` extra); it reads the text with espeak-ng, the container
with misaki. ``--compare LABEL=DIR`` also serves the ``tts_container`` package found in DIR (an
earlier version, e.g. ``git archive REV container/tts_container | tar -x -C DIR``, then
``DIR/container``), measured the same way. The CPU, its flags and the load averages are printed
first: the machine may be shared.

Run: ``python benchmarks/speech_edges.py [--texts 10] [--compare before=DIR]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from real_model import texts

from pytest_tts_scaling.core.audio import audible_threshold, levels

TESTS = Path(__file__).resolve().parent.parent / "container" / "tests"
sys.path.insert(0, str(TESTS))

from speech_checks import tts_serve  # noqa: E402

VOICE = "jm_kumo"
RATE = 24000
FRAME = 240  # the audio checks' 10 ms frame
REQUEST_TIMEOUT_S = 900.0  # one answer on cores shared with a busy machine


@dataclass(frozen=True)
class Row:
    name: str
    lead_ms: list[float]
    audio_s: list[float]

    def line(self, reference: Row | None) -> str:
        mean_s = statistics.fmean(self.audio_s)
        ratio = "" if reference is None else f"{mean_s / statistics.fmean(reference.audio_s):.3f}"
        return (
            f"{self.name:<14} {statistics.median(self.lead_ms):>9.0f} {max(self.lead_ms):>7.0f} "
            f"{mean_s:>13.2f} {min(self.audio_s):>6.2f} {max(self.audio_s):>6.2f} {ratio:>10}"
        )


HEADER = (
    f"{'server':<14} {'lead p50':>9} {'max ms':>7} {'audio s/text':>13} {'min':>6} {'max':>6} "
    f"{'/ kokoro-onnx':>10}"
)


def machine() -> list[str]:
    """The CPU model, whether it has AVX-512 and native bfloat16, and the load averages."""
    info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    model = next((line.split(":", 1)[1].strip() for line in info if "model name" in line), "?")
    flags = set(next((line for line in info if line.startswith("flags")), "").split())
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return [
        f"CPU: {model}, {os.cpu_count()} cores; avx2 {'avx2' in flags}, avx512f "
        f"{'avx512f' in flags}, avx512_bf16 {'avx512_bf16' in flags}, amx_bf16 "
        f"{'amx_bf16' in flags}",
        f"load average: {load}",
    ]


def row(name: str, answers: list[np.ndarray]) -> Row:
    """Leads and lengths of ``name``'s int16 answers, against their quietest 10 ms."""
    floors = [levels(a.tobytes(), [a.nbytes], FRAME)[1] for a in answers]
    threshold = audible_threshold(min(floors))
    leads = []
    for answer in answers:
        audible = np.flatnonzero(np.abs(answer.astype(np.int32)) > threshold)
        leads.append((audible[0] if audible.size else len(answer)) / RATE * 1000)
    return Row(name, leads, [len(a) / RATE for a in answers])


def container_answers(url: str, sample: list[str]) -> list[np.ndarray]:
    answers = []
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        for text in sample:
            response = client.post(url + "/invocations", json={"text": text, "voice": VOICE})
            response.raise_for_status()
            answers.append(np.frombuffer(response.content, dtype="<i2"))
    return answers


def kokoro_onnx_answers(sample: list[str], scratch: Path) -> list[np.ndarray] | None:
    """kokoro-onnx's answers (its defaults, one ONNX Runtime thread); None where not installed."""
    try:
        import onnxruntime
        from kokoro_onnx import Kokoro
    except ImportError:
        return None
    from tts_container import trained_model
    from tts_container.audio import to_pcm16

    parts, voices = trained_model.locate_package_files()
    export = scratch / "kokoro-v1.0.int8.onnx"
    export.write_bytes(trained_model.assemble_export(parts))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(export), options, providers=["CPUExecutionProvider"])
    kokoro = Kokoro.from_session(session, str(voices))
    answers = []
    for text in sample:
        audio, rate = kokoro.create(text, voice=VOICE, lang="en-us")
        assert rate == RATE, rate
        answers.append(np.frombuffer(to_pcm16(audio), dtype="<i2"))
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=10, help="workload texts (default: 10)")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also serve the tts_container package in DIR, as LABEL",
    )
    args = parser.parse_args(argv)
    servers: list[tuple[str, str | None]] = []
    for spec in args.compare:
        label, sep, directory = spec.partition("=")
        if not sep or not label or not (Path(directory) / "tts_container").is_dir():
            parser.error(f"--compare {spec!r}: expected LABEL=DIR with DIR/tts_container")
        servers.append((label, str(Path(directory).resolve())))
    servers.append(("container", None))
    print("\n".join(machine()))
    sample = texts(args.texts)
    print(f"trained Kokoro-82M (int8-derived v1.0), voice {VOICE}, {len(sample)} texts, N=1")
    rows = []
    with tempfile.TemporaryDirectory(prefix="speech-edges-") as scratch:
        for name, python_path in servers:
            env = {} if python_path is None else {"PYTHONPATH": python_path}
            with tts_serve(env, Path(scratch) / f"{name}.log") as url:
                rows.append(row(name, container_answers(url, sample)))
        onnx = kokoro_onnx_answers(sample, Path(scratch))
    reference = None if onnx is None else row("kokoro-onnx", onnx)
    print(HEADER)
    for measured in [*rows, *([] if reference is None else [reference])]:
        print(measured.line(reference))
    if reference is None:
        print("kokoro-onnx: not installed (pip install kokoro-onnx==0.6.1)")
    print("\n".join(machine()[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
