"""Startup markers: the container's side of the scale-out (T_total) timeline.

Each marker is one line on standard output, written whole and flushed::

    TTS_MARKER {"marker": "<name>", "at": "<ISO 8601 UTC>", "elapsed_s": <float>}

- ``at``: wall-clock UTC with microseconds and a ``Z`` suffix, e.g. ``2026-01-02T03:04:05.678901Z``.
- ``elapsed_s``: seconds since the process started (read from ``/proc`` where it can be, so the
  interpreter's own start-up counts; otherwise since this module was imported).

The markers, in the order a starting container writes them (`MARKERS`):

- ``container_started``: first thing ``main`` does, before any heavy import;
- ``framework_init``: torch and kokoro are imported;
- ``weights_ready``: model and voices are loaded;
- ``warmup_done``: a warm-up synthesis finished;
- ``ready``: the server accepts connections and ``GET /ping`` answers 200.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from tts_container.logline import write_line

MARKER_PREFIX = "TTS_MARKER "
MARKERS = ("container_started", "framework_init", "weights_ready", "warmup_done", "ready")


@dataclass(frozen=True)
class Marker:
    """A parsed marker line."""

    name: str
    at: datetime
    elapsed_s: float


def _process_age_s() -> float | None:
    """Seconds since this process was created, from ``/proc``; None where that is unavailable."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat_file:
            stat = stat_file.read()
        with open("/proc/uptime", encoding="ascii") as uptime_file:
            uptime_s = float(uptime_file.read().split()[0])
        # Fields after the command name start at field 3 (state); starttime is field 22.
        start_ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        age = uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return age if 0.0 <= age < 3600.0 else None


_process_start = time.monotonic() - (_process_age_s() or 0.0)


def elapsed_s() -> float:
    """Seconds since the process started."""
    return time.monotonic() - _process_start


def format_at(moment: datetime) -> str:
    """ISO 8601 UTC with microseconds and a ``Z`` suffix."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_marker(name: str, moment: datetime, elapsed: float) -> str:
    """The marker line for ``name`` (without the newline)."""
    if name not in MARKERS:
        raise ValueError(f"unknown marker {name!r}; expected one of {', '.join(MARKERS)}")
    body = {"marker": name, "at": format_at(moment), "elapsed_s": round(elapsed, 6)}
    return MARKER_PREFIX + json.dumps(body)


def emit_marker(name: str, stream: TextIO | None = None) -> str:
    """Write the marker ``name`` now, as one flushed line; return the line."""
    line = format_marker(name, datetime.now(UTC), elapsed_s())
    write_line(line, stream)
    return line


def parse_marker(line: str) -> Marker | None:
    """The marker in a log line, or None when the line holds none."""
    start = line.find(MARKER_PREFIX)
    if start < 0:
        return None
    try:
        body = json.loads(line[start + len(MARKER_PREFIX) :])
        at = datetime.strptime(body["at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        return Marker(name=str(body["marker"]), at=at, elapsed_s=float(body["elapsed_s"]))
    except (ValueError, KeyError, TypeError):
        return None
