"""How a reference server serves requests: its service discipline and the faults it shows.

Plain frozen values, shared by the real server (`server.py`) and the truth (`truth.py`), so the
server that is measured and the model it is checked against cannot disagree about a number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# One piece of an answer: when it is sent (seconds after its service started), the silence at its
# head (s) and which of the speech's pieces follows it (None: silence alone).
AnswerPiece = tuple[float, float, int | None]


@dataclass(frozen=True)
class Slots:
    """`slots` requests served at once in FIFO order (1 = serial); the rest wait.

    Each takes `first_audio_s` to its first audio chunk and `service_s` in all.
    """

    slots: int = 1
    service_s: float = 0.1
    first_audio_s: float = 0.05

    def service_times(self) -> ServiceTimes:
        return ServiceTimes(self.service_s)


@dataclass(frozen=True)
class RandomSlots(Slots):
    """As :class:`Slots`, but each service time is drawn uniformly from service_s·(1 ± spread).

    Draws come from a numpy generator seeded with `seed`, one per request in the order service
    starts, so a run is reproducible while every request still takes its own time.
    """

    spread: float = 0.3
    seed: int = 0

    def service_times(self) -> ServiceTimes:
        return ServiceTimes(self.service_s, self.spread, self.seed)


class ServiceTimes:
    """The service time of each request in the order service starts."""

    def __init__(self, mean_s: float, spread: float = 0.0, seed: int = 0):
        self.mean_s = mean_s
        self.spread = spread
        self._rng = np.random.default_rng(seed)

    def next(self) -> float:
        if not self.spread:
            return self.mean_s
        return float(self.mean_s * (1.0 + self.spread * self._rng.uniform(-1.0, 1.0)))


@dataclass(frozen=True)
class Batching:
    """One executor serving up to `max_batch` requests together in fixed_s + per_request_s·B.

    Before each batch it waits `window_s` (from the end of the previous batch, or from the first
    arrival when idle) to collect requests; every member gets all its audio when the batch ends.
    Waiting even when requests queue lets a closed loop's returning requests join the next batch,
    so its steady state does not depend on how the workers happened to start.
    """

    fixed_s: float = 0.06
    per_request_s: float = 0.04
    max_batch: int = 16
    window_s: float = 0.04

    def batch_s(self, size: int) -> float:
        return self.fixed_s + self.per_request_s * size


Discipline = Slots | Batching


@dataclass(frozen=True)
class Faults:
    """What a reference server does wrong on purpose; the defaults do nothing wrong.

    - `max_queue_depth`: admission bound; beyond it in-flight, answer 503 at once with the body
      of the real container's gate (`queue_saturated`, `queue_depth`, `max_queue_depth`).
    - `error_every`: every k-th request gets its headers, then the connection drops, no audio.
    - `stall_after_headers`: headers, then nothing ever again.
    - `stop_after`: after this many requests, answer nothing at all.
    - `wav_header`: a RIFF/WAVE header with an extra LIST chunk opens every body, sent on
      arrival, before any queueing, whatever format was asked for.
    - `ping_delay_s`: `GET /ping` takes this long while any request is in flight.
    - `truncate_above`: a request that arrives while more than this many are in flight (itself
      included) ends cleanly after half its audio chunks, as a worker that timed out would.
    - `lead_silence_s`: the first chunk is this long of silence, sent at the first audio time;
      the speech follows `lead_silence_s` later (the slot's service time is unchanged).
    - `lead_silence_joined`: that silence comes in one piece with the first of the speech, as
      Kokoro's own answers open (heard `lead_silence_s` after the first byte, arrived with it).
    - `stall_after_first_s`: the first piece of the speech, then nothing for this long, then the
      rest at once (a player starting at the first byte runs dry for the stall less the audio
      it had in hand).
    - `cold_first_s`: the first request waits this long after its headers before it is served,
      as a cold instance loads its weights on first use (/ping answers at once meanwhile).
    - `slow_from_in_flight`, `slow_factor`: once this many requests are first in flight at once,
      every later service takes `slow_factor` times as long (a GPU that throttles once driven
      hard, a leak that grows with load); the first audio keeps its time.
    """

    max_queue_depth: int = 0
    error_every: int = 0
    stall_after_headers: bool = False
    stop_after: int | None = None
    wav_header: bool = False
    ping_delay_s: float = 0.0
    truncate_above: int = 0
    lead_silence_s: float = 0.0
    cold_first_s: float = 0.0
    slow_from_in_flight: int = 0
    slow_factor: float = 1.0
    lead_silence_joined: bool = False
    stall_after_first_s: float = 0.0

    def answer_pieces(self, first_s: float, service_s: float, chunks: int) -> list[AnswerPiece]:
        """When each piece of an answer is sent and what it holds: the speech in `chunks` pieces,
        the first at `first_s` (after a separate lead of silence, `lead_silence_s` later), the
        last at `service_s`, evenly between; with a stall, all but the first at once after it."""
        lead, stall = self.lead_silence_s, self.stall_after_first_s
        speech_at = first_s if self.lead_silence_joined else first_s + lead
        if stall:
            times = [speech_at, *[speech_at + stall] * (chunks - 1)]
        else:
            rest = max(0.0, service_s - speech_at) / max(1, chunks - 1)
            times = [speech_at + i * rest for i in range(chunks)]
        pieces: list[AnswerPiece] = [(at, 0.0, index) for index, at in enumerate(times)]
        if lead and self.lead_silence_joined:
            pieces[0] = (first_s, lead, 0)
        elif lead:
            pieces.insert(0, (first_s, lead, None))
        return pieces
