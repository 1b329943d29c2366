"""What a perfect client must measure against each reference server. Pure: no I/O, no clock.

Closed forms where they exist; otherwise an exact discrete-event simulation of the closed loop
(N workers, each sending its next request the moment the previous answer ends). The tests hold
the simulation against the closed forms, so the simulated truths rest on checked ground.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from pytest_tts_scaling.calibration.disciplines import Batching, Discipline, Faults, Slots
from pytest_tts_scaling.core.playback import glitch_free_start, played_at

# Time from an answer's last byte to the worker's next request, as a client on 127.0.0.1 takes.
# Only its sign matters to the schedule (a returning request misses a batch that starts at once).
RETURN_S = 0.0005
# Steady state: requests per worker discarded as warm-up, then requests per worker kept.
WARMUP_PER_WORKER = 20
KEPT_PER_WORKER = 200
# The K-slot closed form holds while one request in K above the level is more than 5%.
MAX_CLOSED_FORM_SLOTS = 19


@dataclass(frozen=True)
class Truth:
    """The answer a correct qmax gives.

    `q_max`/`bracketed` as in the artifact. `failing_reason`: every measured rung fails for this
    reason (then there is no Q_max). `error_kind`, `audible_after_ttfab_ms`: what the audio checks
    must show. `server_changed`, `cold_first_ms`: what the run must say about a server that
    changed speed, and a slow first answer. `endpoint_error`: the measurement must stop with an
    error about the endpoint instead of a Q_max. `source` says where the number came from.
    """

    q_max: int | None
    bracketed: bool
    source: str
    failing_reason: str | None = None
    endpoint_error: bool = False
    # The rung above Q_max fails with errors of this kind (`audio_short`).
    error_kind: str | None = None
    # Every rung's time to first audible speech (as played) is this long after its TTFAB (p50
    # against p50); and its time to glitch-free playback.
    audible_after_ttfab_ms: float | None = None
    glitch_free_after_ttfab_ms: float | None = None
    # The client hangs up on some requests: the rungs must count them.
    hangs_up: bool = False
    # The server changed speed between the answer's pair and its confirmation: no Q_max, and
    # the change named.
    server_changed: bool = False
    # The first answer's TTFAB (a cold start), as the health probe must report it.
    cold_first_ms: float | None = None


def serial_qmax(service_s: float, first_audio_s: float, slo_ms: float) -> int:
    """One slot: TTFAB = (N − 1)·S + first, so Q_max = floor((SLO − first)/S) + 1."""
    return math.floor((slo_ms / 1000.0 - first_audio_s) / service_s) + 1


def slots_qmax(slots: Slots, slo_ms: float) -> int | None:
    """K slots: requests come in waves of S, so TTFAB = w·S + first for whole w.

    A request waits ceil(N/K) − 1 waves at most and one request in K of the next N does, so the
    p95 truth is Q_max = K·floor((SLO − first + S)/S). None where no closed form holds: random
    service times, or K so large that one in K is within the 5% the p95 ignores.
    """
    if type(slots) is not Slots or slots.slots > MAX_CLOSED_FORM_SLOTS:
        return None
    waves = math.floor((slo_ms / 1000.0 - slots.first_audio_s + slots.service_s) / slots.service_s)
    return slots.slots * max(0, waves)


def batching_qmax(batching: Batching, slo_ms: float) -> int | None:
    """All N in one batch (N ≤ max batch): TTFAB = window + fixed + per_request·N.

    None where Q_max would need more than one batch; the simulation answers there.
    """
    room = slo_ms / 1000.0 - batching.window_s - batching.fixed_s
    q = math.floor(room / batching.per_request_s + 1e-9)
    return q if 1 <= q <= batching.max_batch else None


def hang_up_point_s(slots: Slots, chunks: int, after_audio_s: float) -> float:
    """When, from its start, a listener who hangs up after `after_audio_s` of audio closes an
    answer of the reference server: its service_s of audio comes in `chunks` equal pieces, the
    first at first_audio_s and the rest evenly until service_s (server.py `_audio`)."""
    piece_s = slots.service_s / chunks
    pieces = min(chunks, math.ceil(after_audio_s / piece_s - 1e-9))
    return slots.first_audio_s + (pieces - 1) * (slots.service_s - slots.first_audio_s) / (
        chunks - 1
    )


def hang_up_qmax(slots: Slots, hang_up_s: float, *, frees: bool, slo_ms: float) -> int:
    """One slot, the listener hanging up `hang_up_s` into answers (a closed loop serves its
    workers in turn).

    A server that frees the slot when every request is hung up serves each in hang_up_s:
    TTFAB = (N − 1)·hang_up_s + first, Q_max = floor((SLO − first)/hang_up_s) + 1. One that
    computes the abandoned answer to its end keeps every request S on the slot, and the worker
    that hung up waits for its own abandoned answer too: its next TTFAB = (S − hang_up_s) +
    (N − 1)·S + first. With that share of requests above 5%, the p95 is theirs:
    Q_max = floor((SLO − first + hang_up_s)/S).
    """
    room_s = slo_ms / 1000.0 - slots.first_audio_s
    if frees:
        return math.floor(room_s / hang_up_s + 1e-9) + 1
    return math.floor((room_s + hang_up_s) / slots.service_s + 1e-9)


def closed_form_qmax(discipline: Discipline, slo_ms: float) -> int | None:
    if isinstance(discipline, Batching):
        return batching_qmax(discipline, slo_ms)
    return slots_qmax(discipline, slo_ms)


def simulate_ttfab_s(discipline: Discipline, concurrency: int) -> np.ndarray:
    """TTFAB (s) of every steady-state request of an N-worker closed loop, in service order."""
    if isinstance(discipline, Batching):
        ttfab = _simulate_batching(discipline, concurrency)
    else:
        ttfab = _simulate_slots(discipline, concurrency)
    return ttfab[WARMUP_PER_WORKER * concurrency :]


def p95_ttfab_ms(discipline: Discipline, concurrency: int) -> float:
    """The steady-state p95 TTFAB of the closed loop, computed as the rung statistics are."""
    return float(np.percentile(simulate_ttfab_s(discipline, concurrency) * 1000.0, 95))


def simulated_qmax(discipline: Discipline, slo_ms: float, limit: int = 200) -> int:
    """The highest N whose simulated p95 TTFAB meets the SLO, climbing from 1 (0 when none).

    TTFAB grows with N for every discipline here, so the first failing N ends the climb.
    """
    for concurrency in range(1, limit + 1):
        if p95_ttfab_ms(discipline, concurrency) > slo_ms:
            return concurrency - 1
    raise ValueError(f"Q_max above {limit} at SLO {slo_ms:g} ms: expected a tighter SLO")


def slo_margin_ms(discipline: Discipline, slo_ms: float, q_max: int) -> float:
    """How far the SLO lies from the p95 of Q_max and of Q_max + 1, whichever is nearer.

    A case whose margin is a few ms would be decided by jitter, not by the server.
    """
    below = p95_ttfab_ms(discipline, q_max) if q_max >= 1 else 0.0
    above = p95_ttfab_ms(discipline, q_max + 1)
    return min(slo_ms - below, above - slo_ms)


def truth_for(discipline: Discipline, slo_ms: float) -> Truth:
    """Q_max by closed form where one holds, else by simulation; bracketed by the failing N+1.

    A server slower than the SLO even alone has no Q_max, and nothing brackets it: N=1 fails
    for the SLO (as the artifact says it)."""
    closed = closed_form_qmax(discipline, slo_ms)
    source = "closed form" if closed is not None else "simulation"
    q = closed if closed is not None else simulated_qmax(discipline, slo_ms)
    if not q:
        return Truth(q_max=None, bracketed=False, source=source, failing_reason="slo")
    return Truth(q_max=q, bracketed=True, source=source)


def clock_offsets_s(slots: Slots, faults: Faults, chunks: int, audio_s: float) -> dict[str, float]:
    """Each clock's reading of one answer, from the start of its service (no wait for a slot):
    `ttfab`, `audible` (when its first speech plays) and `playback` (the earliest start from which
    it never runs dry), as a player starting at the first byte hears the server's pieces: its
    speech, `audio_s` long, in `chunks` pieces, timed by `faults.answer_pieces`.

    A request that waited w for its slot reads w more on every clock, so a slots server's Q_max on
    a clock is its Q_max with that clock's offset as the first audio time.
    """
    service_s = slots.service_s
    first_s = min(slots.first_audio_s, service_s)
    speech_piece_s = audio_s / chunks
    pieces = faults.answer_pieces(first_s, service_s, chunks)
    timed = [(at, lead + (0.0 if i is None else speech_piece_s)) for at, lead, i in pieces]
    # The first speech sample lies after every silence up to and including its own piece's lead.
    position = 0.0
    for _, lead, index in pieces:
        position += lead
        if index is not None:
            break
    audible = played_at(timed, [position])[0]
    playback = glitch_free_start(timed)
    assert audible is not None
    assert playback is not None
    return {"ttfab": first_s, "audible": audible, "playback": playback}


def _simulate_slots(slots: Slots, concurrency: int) -> np.ndarray:
    """FIFO over K slots: requests start in arrival order, each on the slot that frees first."""
    times = slots.service_times()
    free = [0.0] * slots.slots
    arrivals = [(0.0, worker) for worker in range(concurrency)]
    total = (WARMUP_PER_WORKER + KEPT_PER_WORKER) * concurrency
    ttfab = np.empty(total)
    for index in range(total):
        arrived, worker = heapq.heappop(arrivals)
        start = max(arrived, heapq.heappop(free))
        end = start + times.next()
        heapq.heappush(free, end)
        ttfab[index] = start + slots.first_audio_s - arrived
        heapq.heappush(arrivals, (end + RETURN_S, worker))
    return ttfab


def _simulate_batching(batching: Batching, concurrency: int) -> np.ndarray:
    """One executor: wait the window after it is free and someone waits, then serve a batch."""
    waiting: deque[float] = deque([0.0] * concurrency)  # arrival times, FIFO
    returning: list[float] = []
    free_at = 0.0
    total = (WARMUP_PER_WORKER + KEPT_PER_WORKER) * concurrency
    ttfab: list[float] = []
    while len(ttfab) < total:
        if not waiting:
            waiting.append(heapq.heappop(returning))
        start = max(free_at, waiting[0]) + batching.window_s
        while returning and returning[0] <= start:
            waiting.append(heapq.heappop(returning))
        size = min(batching.max_batch, len(waiting))
        end = start + batching.batch_s(size)
        for _ in range(size):
            ttfab.append(end - waiting.popleft())
            heapq.heappush(returning, end + RETURN_S)
        free_at = end
    return np.asarray(ttfab[:total])
