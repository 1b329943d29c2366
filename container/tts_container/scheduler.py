"""Which segments run next: the pure core of the segment scheduler (no threads, no I/O, no clock).

Every in-flight request is a `Stream` with at most one segment waiting to run, its next one. The
caller passes the time to each call, so tests drive it with a fake clock.

- ``fifo``: today's behaviour. A worker runs the oldest request's segments one after another, so
  a request runs whole before the next one starts (batch 1).
- ``edf``: earliest deadline first. A new request's first segment is due on arrival; a playing
  stream's next one is due when a player that started at its first audio would run dry, less
  the margin and the measured time of one forward. A segment that has waited ``max_wait_s``
  counts as due then, so a stream whose deadline is far off still runs within that bound while
  new requests keep arriving. Segments due within ``batch_window_s`` of the earliest one run
  in its forward, up to ``batch_max`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tts_container.settings import Settings

Mode = Literal["fifo", "edf"]
# Weight of the newest forward in the moving average of forward times.
RUN_TIME_WEIGHT = 0.2


@dataclass(frozen=True)
class Policy:
    mode: Mode = "fifo"
    batch_max: int = 1
    batch_window_s: float = 1.0
    batch_wait_s: float = 0.0
    margin_s: float = 2.5
    max_wait_s: float = 2.0

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        return cls(
            mode="edf" if settings.scheduler == "edf" else "fifo",
            batch_max=settings.batch_max,
            batch_window_s=settings.batch_window_ms / 1000.0,
            batch_wait_s=settings.batch_wait_ms / 1000.0,
            margin_s=settings.deadline_margin_ms / 1000.0,
            max_wait_s=settings.max_wait_ms / 1000.0,
        )

    @property
    def largest_batch(self) -> int:
        return 1 if self.mode == "fifo" else self.batch_max


@dataclass(eq=False)
class Stream:
    """One request's place in the schedule (times in the caller's clock, seconds)."""

    seq: int
    arrived_at: float
    ready_at: float = 0.0  # when its next segment became ready to run
    due_at: float = 0.0  # when that segment is due
    dry_at: float | None = None  # when its player runs out of audio (None before the first)
    segments: int = 0
    misses: int = 0
    waits_s: list[float] = field(default_factory=list)


class SegmentQueue:
    """Streams whose next segment waits to run, and the choice of the next batch."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.run_estimate_s = 0.0
        self._waiting: list[Stream] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, stream: object) -> bool:
        return any(waiting is stream for waiting in self._waiting)

    def add(self, now: float) -> Stream:
        """A new request: its first segment is due at once."""
        self._seq += 1
        stream = Stream(seq=self._seq, arrived_at=now, ready_at=now, due_at=now)
        self._waiting.append(stream)
        return stream

    def key(self, stream: Stream) -> tuple[float, int]:
        if self.policy.mode == "fifo":
            return (stream.arrived_at, stream.seq)
        return (min(stream.due_at, stream.ready_at + self.policy.max_wait_s), stream.seq)

    def _candidates(self) -> list[Stream]:
        """The streams the next batch takes, in order: the earliest key and those due with it."""
        if not self._waiting:
            return []
        ordered = sorted(self._waiting, key=self.key)
        limit = self.key(ordered[0])[0] + self.policy.batch_window_s
        chosen = [s for s in ordered if self.key(s)[0] <= limit]
        return chosen[: self.policy.largest_batch]

    def take(self, now: float) -> list[Stream]:
        """Remove and return the next batch (empty when nothing waits)."""
        batch = self._candidates()
        for stream in batch:
            self._waiting.remove(stream)
            stream.waits_s.append(max(0.0, now - stream.ready_at))
        return batch

    def hold_s(self, now: float) -> float:
        """How long a worker may still wait for a fuller batch before it takes one (0: take now).

        Only with batching and a batching wait, only while the batch is not full, and never
        past the deadline of the segment that leads it.
        """
        policy = self.policy
        if policy.largest_batch == 1 or policy.batch_wait_s <= 0:
            return 0.0
        batch = self._candidates()
        if not batch or len(batch) >= policy.largest_batch:
            return 0.0
        return max(0.0, min(policy.batch_wait_s, self.key(batch[0])[0] - now))

    def remove(self, stream: Stream) -> bool:
        """Drop a waiting stream (its request was cancelled); False if it was not waiting."""
        for index, waiting in enumerate(self._waiting):
            if waiting is stream:
                del self._waiting[index]
                return True
        return False

    def record_run(self, seconds: float) -> None:
        """One forward took ``seconds``: the moving average that brings deadlines forward."""
        if self.run_estimate_s == 0.0:
            self.run_estimate_s = seconds
        else:
            self.run_estimate_s += RUN_TIME_WEIGHT * (seconds - self.run_estimate_s)

    def finished(self, stream: Stream, now: float, audio_s: float, more: bool) -> bool:
        """A segment of ``stream`` with ``audio_s`` of audio is ready at ``now``; True if it
        came after the stream's player had run dry (a deadline miss).

        The player model: it starts at the first audio, plays what it has, and stalls when it
        runs dry until more arrives. With ``more``, the stream's next segment waits, due when
        that player would run dry, less the margin and the time of one forward.
        """
        missed = stream.dry_at is not None and now > stream.dry_at
        if missed:
            stream.misses += 1
        stream.segments += 1
        stream.dry_at = max(now, stream.dry_at if stream.dry_at is not None else now) + audio_s
        if more:
            stream.ready_at = now
            stream.due_at = stream.dry_at - self.policy.margin_s - self.run_estimate_s
            self._waiting.append(stream)
        return missed
