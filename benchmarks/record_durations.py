"""Record the trained model's per-token durations for every segment a benchmark workload sends.

The GPU machine cannot hold the trained weights (92 MB; it reaches no registry), so
``benchmarks/gpu.sh`` runs the untrained development model of the same graph with these durations
forced in (``FORCE_DURATIONS``, `tts_container.forced_durations`): its decoder then computes the
trained model's frames for each segment, and its compute matches the trained model's.

Covered: every text the scenario can draw (its seeded pool, here the whole pool) with every voice
it sends, segmented as the container segments them, and the container's warm-up text. Only the
durations are computed (ALBERT and the duration predictor, no decoder): seconds, not minutes.

Run: ``python benchmarks/record_durations.py [--scenario kokoro-82m] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "data" / "trained-durations.json"


def record(scenario_names: list[str], threads: int) -> dict[str, object]:
    """The durations file's content for the texts and voices of ``scenario_names``."""
    import torch
    from tts_container.app import WARMUP_TEXT
    from tts_container.engine import KokoroEngine
    from tts_container.forced_durations import FORMAT, segment_key
    from tts_container.kokoro_batch import forward_tokens
    from tts_container.model_files import resolve_model_files
    from tts_container.request import SynthesisRequest
    from tts_container.settings import TRAINED_PACKAGED_LABEL, Settings
    from tts_container.trained_model import EXPORT_SHA256

    from pytest_tts_scaling.load.scenario import load_scenario, resolve
    from pytest_tts_scaling.load.workload import Workload

    torch.set_num_threads(threads)
    settings = Settings(device="cpu")
    engine = KokoroEngine.load(settings)
    if engine.untrained:
        raise SystemExit("record_durations.py: the trained model did not load")
    if engine.weights_label == TRAINED_PACKAGED_LABEL:
        sha256 = EXPORT_SHA256
    else:
        import hashlib

        weights = resolve_model_files(settings).weights
        sha256 = hashlib.sha256(weights.read_bytes()).hexdigest()

    requests: list[tuple[str, str, float]] = [(WARMUP_TEXT, settings.default_voice, 1.0)]
    for name in scenario_names:
        workload = Workload.from_scenario(load_scenario(resolve(name, [])), model=name)
        requests += [(t, v, workload.speed) for t in workload.texts for v in workload.voices]
    voices: dict[str, str] = {}
    segments: dict[str, list[int]] = {}
    for text, voice, speed in requests:
        request = SynthesisRequest(request_id="record", text=text, voice=voice, speed=speed)
        for piece in engine.pieces(request):
            voices[voice] = piece.voice
            key = segment_key(piece.voice, piece.speed, piece.phonemes)
            if key in segments:
                continue
            ids = [engine._vocab[p] for p in piece.phonemes]
            style = engine._voice_packs[piece.voice][len(ids) - 1]
            with torch.inference_mode():
                _, [own] = forward_tokens(engine._model, [ids], style, [speed], decode=False)
            segments[key] = [int(d) for d in own]
    return {
        "format": FORMAT,
        "weights": engine.weights_label,
        "weights_sha256": sha256,
        "scenarios": scenario_names,
        "texts": len({text for text, _, _ in requests}),
        "voices": voices,
        "segments": dict(sorted(segments.items())),
    }


def dumps(data: dict[str, object]) -> str:
    """JSON with one segment a line: small, and a re-recording's diff shows what changed."""
    segments = data["segments"]
    assert isinstance(segments, dict)
    head = {k: v for k, v in data.items() if k != "segments"}
    rows = [
        f"  {json.dumps(k, ensure_ascii=False)}: {json.dumps(v, separators=(',', ':'))}"
        for k, v in segments.items()
    ]
    opening = json.dumps(head, ensure_ascii=False, indent=1)[:-2]
    return opening + ',\n "segments": {\n' + ",\n".join(rows) + "\n }\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario",
        default="kokoro-82m",
        help="comma-separated scenarios whose texts to record (default: kokoro-82m)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
    args = parser.parse_args(argv)
    started = time.monotonic()
    data = record([s.strip() for s in args.scenario.split(",") if s.strip()], args.threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    segments = data["segments"]
    assert isinstance(segments, dict)
    text = dumps(data)
    args.out.write_text(text, encoding="utf-8")
    print(
        f"{args.out}: {len(text.encode()) / 1024:.0f} KiB, {data['texts']} texts, "
        f"{len(segments)} segments, weights {data['weights']} (sha256 {data['weights_sha256']}), "
        f"in {time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
