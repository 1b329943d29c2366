"""``tts-serve`` and ``serve``: run the server with uvicorn.

``serve`` is what SageMaker runs (``docker run IMAGE serve``): 0.0.0.0:8080, the model from
/opt/ml/model. ``tts-serve`` runs the same app on 127.0.0.1 by default, for local use.
Startup writes the markers of `tts_container.markers`; ``ready`` once the server accepts
connections and ``/ping`` answers 200.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tts_container.markers import emit_marker

if TYPE_CHECKING:
    import uvicorn

    from tts_container.state import AppState

log = logging.getLogger("tts_container")

GRACEFUL_SHUTDOWN_S = 5
WS_MAX_MESSAGE_BYTES = 1024 * 1024


def build_parser(prog: str, default_host: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Streaming Kokoro-82M text-to-speech server: GET /ping, POST /invocations (chunked "
            "audio), WS /invocations-bidirectional-stream. Other settings come from the "
            "environment: QUEUE_MAX_DEPTH, MAX_TEXT_CHARS, INFERENCE_WORKERS, MODEL_NAME, DEVICE, "
            "FIRST_SEGMENT_WORDS, DEFAULT_VOICE, TTS_CACHE_DIR."
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
            "/opt/ml/model if it holds a model, else the untrained development model)"
        ),
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default: info)",
    )
    return parser


async def _announce_ready(server: uvicorn.Server, state: AppState) -> None:
    """Write ``ready`` once uvicorn accepts and the model is warm; stop if the load failed."""
    while not (server.started and state.phase in ("ready", "failed")):
        if server.should_exit:
            return
        await asyncio.sleep(0.005)
    if state.phase == "failed":
        log.error("stopping: the model could not be loaded (%s)", state.load_error)
        server.should_exit = True
        return
    emit_marker("ready")


async def _serve(server: uvicorn.Server, state: AppState) -> None:
    announcer = asyncio.create_task(_announce_ready(server, state))
    try:
        await server.serve()
    finally:
        announcer.cancel()


def run(argv: list[str] | None, prog: str, default_host: str) -> int:
    args = build_parser(prog, default_host).parse_args(argv)
    emit_marker("container_started")
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

    import uvicorn

    from tts_container.app import create_app
    from tts_container.settings import Settings, SettingsError

    try:
        overrides = {} if args.model_dir is None else {"model_dir": args.model_dir}
        settings = Settings.from_env(**overrides)
    except SettingsError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    log.info(
        "settings: queue_max_depth=%s inference_workers=%s max_text_chars=%s device=%s "
        "model_dir=%s",
        settings.queue_max_depth or "unbounded",
        settings.inference_workers,
        settings.max_text_chars,
        settings.device,
        settings.model_dir or "(default)",
    )
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        http="h11",
        ws="websockets-sansio",
        ws_max_size=WS_MAX_MESSAGE_BYTES,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        access_log=False,
        log_level=args.log_level,
    )
    server = uvicorn.Server(config)
    state: AppState = app.state.tts

    def stop(signum: int, frame: object) -> None:
        # uvicorn handles SIGTERM/SIGINT while it serves (graceful shutdown), then raises the
        # signal again once done: ending up here then makes a clean exit with status 0.
        server.should_exit = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    asyncio.run(_serve(server, state))
    status = 1 if state.phase == "failed" else 0
    if state.loader is not None and state.loader.is_alive():
        # Stopped while the model loads: torch aborts the process if the interpreter is torn down
        # under a thread still inside it, so leave without the teardown.
        log.info("exiting while the model is still loading")
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def main(argv: list[str] | None = None) -> int:
    """``tts-serve``: the server on 127.0.0.1:8080 by default."""
    return run(argv, "tts-serve", "127.0.0.1")


def sagemaker_main(argv: list[str] | None = None) -> int:
    """``serve``: the server as SageMaker runs it, on 0.0.0.0:8080."""
    return run(argv, "serve", "0.0.0.0")


if __name__ == "__main__":
    sys.exit(main())
