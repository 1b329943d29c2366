"""ttotal's closed-loop probe: load held on its own event loop in a background thread.

The control plane (scale-out, waits on the clock) stays in the main thread, where Ctrl-C and
SIGTERM arrive; the probe's warm-up and recovery window are load held for real time, as every
rung of the ladder is.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING

from pytest_tts_scaling.aws.scaleout.stages import ScaleOutError
from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.load.engine import DRAIN_S, ClosedLoop, MakeRequest

if TYPE_CHECKING:
    from pytest_tts_scaling.load.transports import Transport

PROBE_START_TIMEOUT_S = 30.0


class Probe:
    """The closed-loop probe on its own event loop in a background thread."""

    def __init__(self, transport: Transport, make_request: MakeRequest, *, concurrency: int):
        self.transport = transport
        self.make_request = make_request
        self.concurrency = concurrency
        self.loop: ClosedLoop | None = None
        self.error: BaseException | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._running = threading.Event()
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ttotal-probe", daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        if not self._running.wait(PROBE_START_TIMEOUT_S):
            raise ScaleOutError(f"the probe did not start within {PROBE_START_TIMEOUT_S:g} s")
        self.check()
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the main thread by check()
            self.error = exc
        finally:
            self._running.set()
            self._finished.set()

    async def _main(self) -> None:
        self._event_loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.transport as transport:
            loop = ClosedLoop(transport, self.make_request, concurrency=self.concurrency)
            self.loop = loop.start()
            self._running.set()
            try:
                while not self._stop.is_set():
                    await loop.wait(0.1)
            finally:
                await loop.stop()

    def records(self) -> list[RequestRecord]:
        return list(self.loop.records) if self.loop is not None else []

    def check(self) -> None:
        """Raise in the caller's thread when the probe has died."""
        if self.error is not None:
            raise ScaleOutError(
                f"the probe failed: {type(self.error).__name__}: {self.error}"
            ) from self.error

    def run_for(self, seconds: float) -> None:
        """Hold the load for `seconds` of real time, returning early only if the probe dies."""
        if seconds > 0:
            self._finished.wait(seconds)
        self.check()

    def stop(self) -> None:
        """Stop sending; running requests get the load engine's drain time. Idempotent."""
        if self._thread.ident is None:
            return  # never started
        loop, stop = self._event_loop, self._stop
        if loop is not None and stop is not None and not self._finished.is_set():
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                loop.call_soon_threadsafe(stop.set)
        self._finished.wait(DRAIN_S + 15)
