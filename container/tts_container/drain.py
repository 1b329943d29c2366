"""The bounded drain that SIGTERM starts (SageMaker sends SIGKILL 30 s later).

`Drain.begin` stops admissions at once; in-flight requests (the gate's count) then have until the
deadline to finish. Whatever still streams at the deadline is cut through the callback it
registered: its synthesis is cancelled and its stream ends the way its protocol marks a cut
(an HTTP chunked body without its last chunk, a WebSocket error frame and close 1012).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

from tts_container.gate import InFlight

POLL_S = 0.02
Cut = Callable[[], None]


class Drain:
    def __init__(self, in_flight: InFlight) -> None:
        self.in_flight = in_flight
        self._cuts: dict[int, Cut] = {}
        self._keys = itertools.count()

    @property
    def draining(self) -> bool:
        return not self.in_flight.admitting

    def begin(self) -> None:
        self.in_flight.stop_admitting()

    def register(self, cut: Cut) -> Callable[[], None]:
        """Remember how to cut one stream; call the returned function once the stream ends."""
        key = next(self._keys)
        self._cuts[key] = cut

        def unregister() -> None:
            self._cuts.pop(key, None)

        return unregister

    async def wait(self, timeout_s: float) -> bool:
        """Wait until nothing is in flight (True) or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight.depth > 0:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    def cut_all(self) -> int:
        """Cut every registered stream; returns how many."""
        cuts = list(self._cuts.values())
        self._cuts.clear()
        for cut in cuts:
            cut()
        return len(cuts)
