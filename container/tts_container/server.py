"""The app under uvicorn: JSON refusals from the protocols, and a bounded drain on SIGTERM.

SageMaker stops a container with SIGTERM and kills it 30 s later. On the first SIGTERM (or Ctrl-C)
`DrainingServer` stops admitting at once (503 ``shutting_down`` on open connections), closes the
listening socket, and gives in-flight streams up to ``SHUTDOWN_DRAIN_S`` (Settings, default 20 s);
what still streams then is cut. uvicorn's own shutdown follows (idle connections closed, WebSocket
sessions closed with 1012) and the process exits 0, inside the 30 s. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from tts_container.markers import emit_marker
from tts_container.protocol import JsonErrorH11Protocol, JsonErrorWebSocketProtocol
from tts_container.state import AppState

log = logging.getLogger("tts_container")

CUT_GRACE_S = 1.0  # after the cut, for cut streams to end
CLOSE_TIMEOUT_S = 2.0  # uvicorn's wait for connections once drained
WS_MAX_MESSAGE_BYTES = 1024 * 1024
H11_MAX_HEAD_BYTES = 16 * 1024


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the drain of this module's docstring before its own shutdown."""

    def __init__(self, config: uvicorn.Config, state: AppState, drain_s: float) -> None:
        super().__init__(config)
        self.state = state
        self.drain_s = drain_s
        self.drain_requested = False
        self._drain_task: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain_requested:
            super().handle_exit(sig, frame)  # a second signal: no more waiting
            return
        self.drain_requested = True
        self.state.drain.begin()

    async def on_tick(self, counter: int) -> bool:
        if self.drain_requested and self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain_then_exit())
        return await super().on_tick(counter)

    async def _drain_then_exit(self) -> None:
        began = time.monotonic()
        for listener in self.servers:
            listener.close()
        drain = self.state.drain
        log.info(
            "shutting down: admitting nothing; %d in flight get up to %g s",
            drain.in_flight.depth,
            self.drain_s,
        )
        if not await drain.wait(self.drain_s):
            log.warning("drain deadline: cutting %d streams", drain.cut_all())
            await drain.wait(CUT_GRACE_S)
        log.info(
            "drained in %.2f s (%d still in flight)",
            time.monotonic() - began,
            drain.in_flight.depth,
        )
        self.should_exit = True


def uvicorn_config(app: Starlette, *, host: str, port: int, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=JsonErrorH11Protocol,
        ws=JsonErrorWebSocketProtocol,
        ws_max_size=WS_MAX_MESSAGE_BYTES,
        h11_max_incomplete_event_size=H11_MAX_HEAD_BYTES,
        lifespan="on",
        timeout_graceful_shutdown=int(CLOSE_TIMEOUT_S),
        access_log=False,
        log_level=log_level,
        log_config=None,  # uvicorn's lines go through the process's own logging format
    )


async def _announce_ready(server: DrainingServer, state: AppState) -> None:
    """Write ``ready`` once uvicorn accepts and the model is warm; stop if the load failed."""
    while not (server.started and state.phase in ("ready", "failed")):
        if server.should_exit or server.drain_requested:
            return
        await asyncio.sleep(0.005)
    if state.phase == "failed":
        log.error("stopping: the model could not be loaded (%s)", state.load_error)
        server.should_exit = True
        return
    emit_marker("ready")


async def _serve(server: DrainingServer, state: AppState) -> None:
    announcer = asyncio.create_task(_announce_ready(server, state))
    try:
        await server.serve()
    finally:
        announcer.cancel()


def serve(app: Starlette, *, host: str, port: int, log_level: str = "info") -> int:
    """Run ``app`` until SIGTERM/SIGINT; 0 after a clean stop, 1 if the model failed to load."""
    state: AppState = app.state.tts
    server = DrainingServer(
        uvicorn_config(app, host=host, port=port, log_level=log_level),
        state,
        state.settings.shutdown_drain_s,
    )

    def stop(signum: int, frame: object) -> None:
        # uvicorn handles the signals while it serves, then raises a second one again once done:
        # ending up here then makes a clean exit with status 0.
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
