"""Which concurrency to measure next (docs/method.md). Pure: rungs in, the next step out.

First, a rung that could not be judged is measured again, and a doubtful failure re-tested.
Then either the given ladder is climbed (the published method's rule: stop after two confirmed
failures, then bisect between the last pass and the first failure), or, with no ladder, the
adaptive search: measure N=1, predict the SLO crossing from the measured curve, measure around
it and finish on the pair N (pass) / N+1 (a usable, clear failure).

Prediction, in order of trust:
- steps, when the rungs fit a server of K slots (TTFAB comes in waves of the service time S,
  K ≈ throughput × S): Q_max = K·floor((SLO − first + S)/S); or, when N=1 does not show S (a
  batch of one is faster than a full one), waves read from a saturated rung whose TTFAB sits on
  two levels S apart;
- past the knee a closed loop's latency is N/X (Little's law, X the throughput), so each ms of
  headroom below the SLO holds X/1000 more requests; the slope of the measured curve (secant,
  or the chord to a known failure) is used where it says more, up to twice that;
- bisection, whenever two predictions in a row did not halve the interval left.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tts_scaling.core.schema import Rung
from pytest_tts_scaling.core.verdicts import (
    MAX_MEASUREMENTS,
    TRANSIENT_REASONS,
    select_qmax,
    standing,
    word,
)

# Unusable rungs measured once more: the transient reasons, and a rung where nothing completed
# (a server that sends each answer whole after seconds of silence is slow, not stopped; only a
# second such rung blocks the rungs above). A gate-limited rung is the endpoint's own bound.
REMEASURED = TRANSIENT_REASONS | {"nothing_completed"}
# The ladder stops climbing after this many confirmed failures.
FAILS_TO_STOP = 2
# Above a failure that is confirmed but not clear (twice just above the SLO), concurrencies this
# share higher (at least one more) are tried for a clear bracket.
BRACKET_SHARES = (0.0, 0.05, 0.1, 0.2)
# Measured p95 within this share of S of the step model's value fits it.
STEP_TOLERANCE = 0.15
# Throughput × S within this share of a whole number reads as that many slots.
SLOTS_TOLERANCE = 0.05
# Two secants of the measured curve that agree this closely show its linear part: trusted in
# full; a lone secant is trusted up to twice Little's law (two flat points of a slot server
# would otherwise point at infinity).
SECANTS_AGREE = 0.25


@dataclass(frozen=True)
class Step:
    concurrency: int
    phase: str


def add_measurement(rungs: Sequence[Rung], rung: Rung) -> list[Rung]:
    """The rungs with `rung` as the latest measurement of its concurrency (moved to the end).

    A measurement of a concurrency already measured replaces it and keeps what the earlier
    ones showed, in `earlier`.
    """
    previous = next((r for r in rungs if r.concurrency == rung.concurrency), None)
    if previous is None:
        return [*rungs, rung]
    replaced = rung.model_copy(
        update={
            "remeasured": previous.remeasured + 1,
            "earlier": [*previous.earlier, word(previous)],
        }
    )
    return [*(r for r in rungs if r is not previous), replaced]


def worst_case_rungs(max_concurrency: int) -> int:
    """The most distinct concurrencies the adaptive search measures (its hard stop)."""
    return 2 * math.ceil(math.log2(max(2, max_concurrency))) + 6


def next_step(
    rungs: Sequence[Rung],
    slo_ms: float,
    *,
    ladder: Sequence[int] | None,
    max_concurrency: int,
) -> Step | None:
    """The next rung to measure, or None when done.

    `rungs` holds one rung per concurrency (its latest measurement), in the order they were
    last measured; `ladder` None means the adaptive search.
    """
    stands = {r.concurrency: standing(r, rungs, slo_ms) for r in rungs}
    caps = [c for c, s in stands.items() if s == "fail"]
    ceiling = min(caps) if caps else None
    for rung in sorted(rungs, key=lambda r: r.concurrency):
        if ceiling is not None and rung.concurrency >= ceiling:
            break
        if rung.remeasured + 1 >= MAX_MEASUREMENTS:
            continue
        stand = stands[rung.concurrency]
        once_unusable = any(e.startswith("unusable") for e in rung.earlier)
        if stand == "unusable" and rung.unusable_reason in REMEASURED and not once_unusable:
            return Step(rung.concurrency, "remeasure")
        if stand == "doubtful":
            return Step(rung.concurrency, "retest")
    # Above a rung blocked for good (gate-limited, nothing completed) every rung would be too.
    blocked = [
        r.concurrency for r in rungs if not r.usable and r.unusable_reason not in TRANSIENT_REASONS
    ]
    top = min([max_concurrency, *(c - 1 for c in blocked)])
    if ladder is not None:
        return _ladder_step(ladder, rungs, slo_ms, top)
    low, _ = _bounds(rungs, slo_ms)
    if ceiling is not None and low == ceiling - 1 and surprising(rungs, slo_ms, ceiling):
        return Step(ceiling, "retest")
    concurrency = adaptive_concurrency(rungs, slo_ms, top, blocked=top < max_concurrency)
    return None if concurrency is None else Step(concurrency, "search")


def _ladder_step(
    ladder: Sequence[int], rungs: Sequence[Rung], slo_ms: float, top: int
) -> Step | None:
    measured = {r.concurrency for r in rungs}
    fails = sum(1 for r in rungs if standing(r, rungs, slo_ms) == "fail")
    if fails < FAILS_TO_STOP:
        for rung in ladder:
            if rung not in measured and rung <= top:
                return Step(rung, "ladder")
    q_max, _ = select_qmax(rungs, slo_ms)
    failing = sorted(
        r.concurrency
        for r in rungs
        if standing(r, rungs, slo_ms) == "fail" and (q_max is None or r.concurrency > q_max)
    )
    if not failing:
        return None
    low, high = (q_max or 0), failing[0]
    middle = (low + high) // 2
    if high - low <= 1 or middle in measured or middle < 1:
        return None
    return Step(middle, "refine")


def adaptive_concurrency(
    rungs: Sequence[Rung], slo_ms: float, top: int, *, blocked: bool = False
) -> int | None:
    """The adaptive search's next concurrency, at most `top`, or None when it is done.

    `blocked`: `top + 1` was measured and is blocked for good (gate-limited, say), so a
    prediction beyond it bisects instead.
    """
    by_c = {r.concurrency: r for r in rungs}
    if 1 not in by_c:
        return 1 if top >= 1 else None
    if len(by_c) >= worst_case_rungs(top):
        return None
    low, high = _bounds(rungs, slo_ms)
    if low is None:
        return None  # no rung passes below the lowest failure: nothing meets the SLO
    if high is not None and high == low + 1:
        if select_qmax(rungs, slo_ms)[1]:
            return None
        # Confirmed but not clear (twice just above the SLO): look for a clear one above it.
        steps = sorted({high + max(1, math.ceil(share * high)) for share in BRACKET_SHARES})
        above = [c for c in steps if c <= top and c not in by_c]
        return above[0] if above else None
    limit = top if high is None else min(top, high - 1)
    if low >= limit:
        return None
    if _stalled(rungs, slo_ms):
        guess = (low + (high if high is not None else limit + 1)) / 2
    else:
        guess = predict_crossing(rungs, slo_ms, low, high)
        if blocked and high is None and guess > top:
            guess = (low + top + 1) / 2
    candidate = min(limit, max(low + 1, math.floor(guess)))
    free = [c for c in range(low + 1, limit + 1) if c not in by_c]
    return min(free, key=lambda c: (abs(c - candidate), c)) if free else None


def surprising(rungs: Sequence[Rung], slo_ms: float, concurrency: int) -> bool:
    """A failure the curve measured before it said would pass: re-tested once before it caps.

    The search has no pass above a failure to contradict it (it never measures there), so a
    single noisy failure shows as one the prediction did not expect. Only the failure that ends
    the search (N+1 of the pair) is worth the re-test: any other is superseded by one below it.
    """
    order = [r.concurrency for r in rungs]
    rung = rungs[order.index(concurrency)]
    if rung.earlier:
        return False
    before = list(rungs[: order.index(concurrency)])
    low, high = _bounds(before, slo_ms)
    # Between a pass and a failure one apart there was nothing to expect: it had to be measured.
    if low is None or low >= concurrency or (high is not None and high <= concurrency + 1):
        return False
    return math.floor(predict_crossing(before, slo_ms, low, high)) >= concurrency


def _bounds(rungs: Sequence[Rung], slo_ms: float) -> tuple[int | None, int | None]:
    """The highest pass below the lowest confirmed failure, and that failure."""
    stands = {r.concurrency: standing(r, rungs, slo_ms) for r in rungs}
    caps = [c for c, s in stands.items() if s == "fail"]
    high = min(caps) if caps else None
    passes = [c for c, s in stands.items() if s == "pass" and (high is None or c < high)]
    return (max(passes) if passes else None), high


def _stalled(rungs: Sequence[Rung], slo_ms: float) -> bool:
    """Two predictions in a row that did not halve the interval between pass and failure."""
    widths: list[int] = []
    for end in range(1, len(rungs) + 1):
        low, high = _bounds(rungs[:end], slo_ms)
        if low is not None and high is not None:
            widths.append(high - low)
    return len(widths) >= 3 and widths[-1] * 2 > widths[-2] and widths[-2] * 2 > widths[-3]


def p95(rung: Rung) -> float | None:
    """The p95 the verdict used, on the SLO's clock (goodput where recorded)."""
    return rung.judged_p95_ms


def predict_crossing(rungs: Sequence[Rung], slo_ms: float, low: int, high: int | None) -> float:
    """The concurrency at which the p95 reaches the SLO, from the measured curve."""
    by_c = {r.concurrency: r for r in rungs}
    for steps in (step_prediction(rungs, slo_ms), wave_prediction(rungs, slo_ms)):
        if steps is not None and low <= steps and (high is None or steps < high):
            return steps  # at `low` itself: the crossing is there, and low + 1 is the pair
    last = by_c[low]
    last_p95 = p95(last) or 0.0
    headroom = slo_ms - last_p95
    # Little's law past the knee: N/X more latency per request held.
    per_ms = last.throughput_rps / 1000.0
    if high is not None and (high_p95 := p95(by_c[high])) is not None and high_p95 > last_p95:
        chord = (high - low) / (high_p95 - last_p95)
        return low + headroom * max(chord, per_ms)
    secants = _secants([r for r in rungs if r.usable and r.concurrency <= low])
    if len(secants) >= 2 and abs(secants[-1] - secants[-2]) <= SECANTS_AGREE * secants[-2]:
        per_ms = max(per_ms, secants[-1])
    elif secants:
        per_ms = max(per_ms, min(secants[-1], 2 * per_ms)) if per_ms > 0 else secants[-1]
    return low + headroom * per_ms if per_ms > 0 else low + 1


def _secants(rungs: Sequence[Rung]) -> list[float]:
    """Requests per ms of p95 between consecutive measured points where the p95 rises."""
    points = sorted((r.concurrency, p95(r)) for r in rungs if p95(r) is not None)
    out: list[float] = []
    for (n0, y0), (n1, y1) in itertools.pairwise(points):
        if y0 is not None and y1 is not None and y1 > y0:
            out.append((n1 - n0) / (y1 - y0))
    return out


def step_prediction(rungs: Sequence[Rung], slo_ms: float) -> int | None:
    """Q_max of a K-slot server, when every usable rung fits one: K·floor((SLO − first + S)/S).

    K is read from the highest usable passing rung as throughput × S; S is the median latency
    (the mean carries the warm-up of a cold client) and `first` the p95 TTFAB at N=1.
    """
    by_c = {r.concurrency: r for r in rungs}
    one = by_c.get(1)
    if one is None or not one.usable or one.latency_ms.p50 is None or p95(one) is None:
        return None
    service, first = one.latency_ms.p50, p95(one) or 0.0
    passing = [r for r in rungs if r.usable and r.meets_slo]
    if not passing or service <= 0:
        return None
    top = max(passing, key=lambda r: r.concurrency)
    estimate = top.throughput_rps * service / 1000.0
    slots = round(estimate)
    if slots < 1 or abs(estimate - slots) > SLOTS_TOLERANCE * slots:
        return None
    return _waves_qmax(rungs, slo_ms, slots, service, first, from_concurrency=1)


def wave_prediction(rungs: Sequence[Rung], slo_ms: float) -> int | None:
    """Q_max of a server that, saturated, serves K requests per wave of S (full batches, or K
    slots), read from a usable rung that straddles a wave boundary: its TTFAB sits on two levels
    S apart (its minimum and its p95, the median on one of them, little above), K is a whole
    number below N within tolerance (scatter included), and every other saturated rung fits the
    waves. K is Little's law, N × S over the mean latency: a window's count of completions is off
    by up to a wave of them (a short window, or one ended early, holds few waves); a mean over
    its requests is not.
    """
    for rung in sorted(rungs, key=lambda r: -r.concurrency):
        t = rung.judged_ms
        if not rung.usable or t is None:
            continue
        if t.min is None or t.p50 is None or t.p95 is None or t.max is None:
            continue
        if rung.failed or rung.waited_past_bound:
            continue  # its goodput p95 is not the delivered TTFAB these levels are read from
        # Each level scatters by about twice max − p95 around it: the minimum lies that far below
        # the lower level, the p95 a little above the upper one.
        scatter = t.max - t.p95
        wave = t.p95 - t.min - 2 * scatter
        slack = STEP_TOLERANCE * wave
        if wave <= 0 or scatter > slack or min(t.p50 - t.min, t.p95 - t.p50) > slack:
            continue
        cycle = rung.latency_ms.mean
        if cycle is None or cycle <= 0:
            continue
        estimate = rung.concurrency_mean * wave / cycle
        slots = round(estimate)
        unsure = abs(estimate - slots) + rung.concurrency_mean * scatter / cycle
        if not 1 <= slots < rung.concurrency or unsure > SLOTS_TOLERANCE * slots:
            continue
        first = t.p95 - (math.ceil(rung.concurrency / slots) - 1) * wave
        if first <= 0:
            continue
        q_max = _waves_qmax(rungs, slo_ms, slots, wave, first, from_concurrency=slots)
        if q_max is not None:
            return q_max
    return None


def _waves_qmax(
    rungs: Sequence[Rung],
    slo_ms: float,
    slots: int,
    wave: float,
    first: float,
    *,
    from_concurrency: int,
) -> int | None:
    """K·floor((SLO − first + S)/S) for `slots` per wave of `wave` ms, the first wave at `first`
    ms, when every usable rung from `from_concurrency` on has that model's p95 within
    tolerance; else None."""
    for rung in rungs:
        measured = p95(rung)
        if not rung.usable or measured is None or rung.concurrency < from_concurrency:
            continue
        model = first + (math.ceil(rung.concurrency / slots) - 1) * wave
        if abs(measured - model) > STEP_TOLERANCE * wave:
            return None
    return slots * math.floor((slo_ms - first + wave) / wave + 1e-9)


def schedule_estimate_s(ladder: Sequence[int], hold_s: float, gap_s: float) -> float:
    """Wall-clock of the whole ladder if every rung passes (the longest case without refining)."""
    return len(ladder) * hold_s + max(0, len(ladder) - 1) * gap_s


def rungs_left(rungs: Sequence[Rung], slo_ms: float, *, ladder: Sequence[int] | None) -> int:
    """About how many rungs are still to measure, for the ETA (not a bound: see dry run)."""
    if not rungs:
        return len(ladder) if ladder is not None else 3
    low, high = _bounds(rungs, slo_ms)
    width = 0 if high is None else high - (low or 0)
    refine = math.ceil(math.log2(width)) if width > 1 else 0
    if ladder is not None:
        fails = sum(1 for r in rungs if standing(r, rungs, slo_ms) == "fail")
        measured = {r.concurrency for r in rungs}
        climb = sum(1 for c in ladder if c not in measured) if fails < FAILS_TO_STOP else 0
        return climb + refine
    if low is None:
        return 0
    return 2 if high is None else min(2, refine)
