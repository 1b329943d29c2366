"""Stop signals while an endpoint is frozen: they must end in a restore, never cut one short.

While frozen, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread, so the `finally`
that restores runs as it does for Ctrl-C; during the restore every stop signal is held back and
raised once the restore is done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived while frozen; pytest and asyncio stop for it as for Ctrl-C.

    A signal held back during a restore is raised as this once the restore is done, SIGINT
    included; the exit status is 128 + the signal number, as the shell reports it.
    """

    def __init__(self, signum: int, when: str = "while frozen") -> None:
        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} received {when}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """For the duration, SIGTERM and SIGHUP raise Terminated; the previous handlers come back.

    SIGHUP is what a closed terminal or SSH session sends: it must restore as SIGTERM does.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """SIGTERM, SIGHUP and SIGINT are recorded, not acted on, so no signal can cut a restore."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (*STOP_SIGNALS, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
