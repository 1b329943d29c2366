"""The listener's clocks: one answer's pieces played as they arrive. Pure: no I/O, no clock.

A player starts at the first audio byte and plays in real time; when it runs dry it waits, and
resumes when the next piece arrives (docs/method.md#the-listeners-clocks). From each piece's
arrival and the audio seconds it carries follow when any point of the audio plays (the first
audible sample: time to first audible speech), the earliest start from which playback never runs
dry (time to glitch-free playback) and how long the player waited (underrun, `stats.underrun_s`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

# (arrival time, audio seconds carried), in arrival order; any one unit of time.
Piece = tuple[float, float]


def play_starts(pieces: Sequence[Piece]) -> list[float]:
    """When each piece begins to play: on arrival, or when the audio before it has played."""
    starts: list[float] = []
    play_until: float | None = None
    for arrived, seconds in pieces:
        start = arrived if play_until is None else max(arrived, play_until)
        starts.append(start)
        play_until = start + seconds
    return starts


def played_at(pieces: Sequence[Piece], positions: Sequence[float]) -> list[float | None]:
    """When each point of the audio, so many seconds into the stream, plays; None past its end."""
    starts = play_starts(pieces)
    ends = list(accumulate(seconds for _, seconds in pieces))
    times: list[float | None] = []
    for position in positions:
        index = bisect_right(ends, position)
        if index >= len(pieces) or position < 0:
            times.append(None)
            continue
        before = ends[index - 1] if index else 0.0
        times.append(starts[index] + position - before)
    return times


def glitch_free_start(pieces: Sequence[Piece]) -> float | None:
    """The earliest start from which playback never runs dry: max over pieces of (arrival −
    audio seconds before it). Less the first piece's arrival, the buffer a client needs."""
    before = 0.0
    latest: float | None = None
    for arrived, seconds in pieces:
        need = arrived - before
        latest = need if latest is None else max(latest, need)
        before += seconds
    return latest
