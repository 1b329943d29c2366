"""The trained Kokoro-82M against the untrained development model on this machine: RTF and time to
first audio at N=1 (in process, no server), then Q_max at each SLO per weights and scheduler.

- RTF: synthesis seconds per second of audio, over the workload's texts (``scenarios/texts``),
  one request at a time through the engine's own segmenting (the short first segment, then
  sentences), on ``--threads`` torch threads (default 1: what ``make qmax`` gives the server on a
  2-core machine, the other core being the client's);
- TTFAB at N=1: G2P and the first segment's forward, per text (median and max);
- Q_max at ``--report-slo-ms`` (default 3000 and 1500 ms): ``benchmarks/capacity.py`` with the
  modes trained-fifo, trained-edf, untrained-fifo, untrained-edf (``--capacity``; CPU heavy).

The untrained model's durations are not the trained model's, so its audio (and compute) per text
differs: the table says how much. The load average is printed first, as the machine is shared.

Run: ``python benchmarks/real_model.py [--texts 12] [--capacity] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ROOT / "scenarios" / "texts" / "assistant.txt"
MODES = "trained-fifo,trained-edf,untrained-fifo,untrained-edf"


def texts(count: int) -> list[str]:
    lines = [line.strip() for line in TEXTS.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and not line.startswith("#")][:count]


def measure(weights: str, sample: list[str], threads: int) -> dict[str, float]:
    """RTF and first-audio times of one engine over ``sample``, one request at a time."""
    import torch
    from tts_container.engine import KokoroEngine
    from tts_container.request import SynthesisRequest
    from tts_container.settings import Settings
    from tts_container.trim import for_stream

    engine = KokoroEngine.load(Settings(device="cpu", weights=weights))
    torch.set_num_threads(threads)
    voice = "jm_kumo" if weights == "trained" else "af_heart"
    warm = SynthesisRequest("warm", text="Warm up, once.", voice=voice)
    engine.synthesize([next(engine.pieces(warm))])
    firsts, compute, audio = [], 0.0, 0.0
    for index, text in enumerate(sample):
        request = SynthesisRequest(f"r{index}", text=text, voice=voice)
        began = time.perf_counter()
        for number, piece in enumerate(engine.pieces(request)):
            [samples] = engine.synthesize([piece])
            samples = for_stream(samples, piece, engine.sample_rate)  # the audio as streamed
            if number == 0:
                firsts.append(time.perf_counter() - began)
            audio += len(samples) / engine.sample_rate
        compute += time.perf_counter() - began
    return {
        "rtf": compute / audio,
        "audio_s_per_text": audio / len(sample),
        "ttfab_median_ms": statistics.median(firsts) * 1000,
        "ttfab_max_ms": max(firsts) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=12, help="workload texts (default: 12)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--capacity", action="store_true", help="also Q_max (capacity.py)")
    parser.add_argument("--report-slo-ms", default="3000,1500")
    parser.add_argument("--out", type=Path, default=Path("reports/real-model"))
    args = parser.parse_args(argv)
    with open("/proc/loadavg") as f:
        print(f"load average: {' '.join(f.read().split()[:3])}, cores: {os.cpu_count()}")
    sample = texts(args.texts)
    print(f"{'weights':<10} {'RTF':>6} {'audio s/text':>13} {'TTFAB med ms':>13} {'max ms':>7}")
    for weights in ("trained", "untrained"):
        row = measure(weights, sample, args.threads)
        print(
            f"{weights:<10} {row['rtf']:>6.3f} {row['audio_s_per_text']:>13.2f} "
            f"{row['ttfab_median_ms']:>13.0f} {row['ttfab_max_ms']:>7.0f}"
        )
    if args.capacity:
        command = [
            sys.executable,
            str(ROOT / "benchmarks" / "capacity.py"),
            "--modes",
            MODES,
            "--report-slo-ms",
            args.report_slo_ms,
            "--out",
            str(args.out),
        ]
        return subprocess.run(command, check=False).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
