"""One place that writes whole, flushed lines to standard output.

Startup markers come from the loader thread and metrics lines from the event loop; a lock keeps
each line whole, and the flush makes it visible to a log collector at once.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

_lock = threading.Lock()


def write_line(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` and a newline to ``stream`` (standard output by default) and flush."""
    out = sys.stdout if stream is None else stream
    with _lock:
        out.write(text + "\n")
        out.flush()
