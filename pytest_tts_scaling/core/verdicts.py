"""Rung verdicts and Q_max (docs/method.md). Pure: no I/O, no clock.

Goodput: every request that started in the measure window counts. One that ended without audio
(an error, a timeout, an answer with no audio, or with audio the checks found short or silent
against the endpoint's own at N=1) counts as a TTFAB above the SLO in the p95, and
more than 1% of them fail the rung with reason `errors`. A request cut after waiting the stall
bound for its answer's body while the endpoint answered others (`waited_past_bound`) is slow, not
an error: above the SLO in the p95, and not among the errors. Rejections (503/408/429) mean the
admission gate set the rung (`gate_limited`, unusable), not the server's latency.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_tts_scaling.core.audio import AUDIO_ERRORS, AudioReference
from pytest_tts_scaling.core.confirm import DOUBTFUL, change_words, confirmation_line
from pytest_tts_scaling.core.records import WAITED_PAST_BOUND, RequestRecord
from pytest_tts_scaling.core.schema import CLOCK_WORDS, Interval, QmaxArtifact, Rung, SloMetric
from pytest_tts_scaling.core.stats import quantile_ci, summarize, trend

# A closed loop whose time-weighted in-flight is more than this far below N did not hold N.
CLIENT_SHORTFALL = 0.05
# More rejections than this share of the window means the admission gate, not latency, set it.
MAX_REJECTED_SHARE = 0.01
# More requests without audio than this share of the window fails the rung (reason `errors`).
MAX_ERROR_SHARE = 0.01
# TTFAB that moved across the window by more than this share of the SLO, beyond TREND_SIGMAS
# standard errors of the move, had not settled. The floor keeps sub-millisecond noise, and
# steady waves of a K-slot server, from reading as a trend.
DRIFT_FLOOR_SHARE = 0.1
TREND_SIGMAS = 3.0
# A request without audio enters the goodput p95 at this multiple of the SLO (or its own
# duration, if longer): above the SLO, and finite, so the artifact stays plain JSON.
NO_AUDIO_AT_SLO_TIMES = 2.0
# Unusable for a reason that can pass (the next measurement may be fine): measured again.
TRANSIENT_REASONS = frozenset(
    {"not_settled", "instance_count_changed", "client_could_not_hold", "client_saturated"}
)
# How often one concurrency is measured at most: once, again when unusable, once more to
# re-test a doubtful failure.
MAX_MEASUREMENTS = 3

Standing = Literal["pass", "fail", "doubtful", "unusable"]
# A request's time on the SLO's clock (ms from its start), None where it has none.
RecordClock = Callable[[RequestRecord], float | None]


def ttfab(record: RequestRecord) -> float | None:
    return record.ttfab_ms


def record_clock(metric: SloMetric, reference: AudioReference | None = None) -> RecordClock:
    """Each request's time on the SLO's clock (docs/method.md#the-listeners-clocks).

    On the audible clock a request is read through the N=1 `reference` (while its rung runs it
    has not been judged yet); before there is one (the N=1 rung itself, while it runs) its TTFAB
    stands in, the earliest its speech could play.
    """
    if metric == "playback":
        return lambda record: record.glitch_free_ms
    if metric == "audible" and reference is not None:
        return reference.speech_ms
    return ttfab


@dataclass(frozen=True)
class RungInputs:
    """What one rung measured: the requests that started in its measure window."""

    concurrency: int
    window: Sequence[RequestRecord]
    measure_s: float
    concurrency_mean: float
    concurrency_max: float
    instance_count_changed: bool = False
    instance_count: int | None = None
    phase: str = "ladder"
    window_start: str | None = None
    window_end: str | None = None
    # The client's own event-loop lateness (p99 over the window) and how much of it the SLO
    # tolerates: beyond it the client's clock, not the server, set the numbers.
    client_lag_p99_ms: float | None = None
    client_lag_bound_ms: float | None = None


def delivered(record: RequestRecord) -> bool:
    """The request ended with audio, so it has a TTFAB."""
    return record.status == "ok" and record.ttfab_ms is not None


def failure_kind(record: RequestRecord) -> str:
    """`no_audio`, `http_500`, `stalled`, …: the error code's stable prefix, else the status."""
    if record.status == "ok":
        return "no_audio"
    if record.error_code:
        return record.error_code.split(":", 1)[0].strip()
    return record.status


def unusable_reason(inputs: RungInputs, slo_ms: float, clock: RecordClock = ttfab) -> str | None:
    """Why a rung cannot be judged against the SLO on its `clock`, or None when it can
    (docs/method.md#a-rung-and-how-it-is-judged)."""
    window = inputs.window
    ok = [r for r in window if delivered(r)]
    rejected = sum(1 for r in window if r.status == "rejected")
    if inputs.instance_count_changed:
        return "instance_count_changed"
    lag, bound = inputs.client_lag_p99_ms, inputs.client_lag_bound_ms
    if lag is not None and bound is not None and lag > bound:
        return "client_saturated"
    if not ok and not any(waited_past_bound(r) or answered_wrong(r) for r in window):
        # (every request waiting past the bound, or answered with wrong audio, is a clear failure)
        return "nothing_completed"
    if rejected / len(window) > MAX_REJECTED_SHARE:
        return "gate_limited"
    if too_many_errors(window):
        # Decided: the rung fails for its errors. (After each error a worker pauses, so the
        # in-flight count falls short of N; holding N would only add to them.)
        return None
    if inputs.concurrency_mean < (1 - CLIENT_SHORTFALL) * inputs.concurrency:
        return "client_could_not_hold"
    timed = [(r.start_ns, at) for r in ok if (at := clock(r)) is not None]
    change, noise = trend([start for start, _ in timed], [at for _, at in timed])
    if abs(change) > max(DRIFT_FLOOR_SHARE * slo_ms, TREND_SIGMAS * noise):
        return "not_settled"
    return None


def waited_past_bound(record: RequestRecord) -> bool:
    """Cut after waiting the stall bound for its answer's body while others were answered."""
    return record.error_code == WAITED_PAST_BOUND


def answered_wrong(record: RequestRecord) -> bool:
    """Answered in full, but the audio checks found it short or silent (core/audio.py)."""
    return record.error_code in AUDIO_ERRORS


def without_audio(window: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Requests that failed without audio: errors, timeouts, answers with none (not rejections,
    not requests that waited past the bound in a queue)."""
    return [
        r
        for r in window
        if not delivered(r) and r.status != "rejected" and not waited_past_bound(r)
    ]


def too_many_errors(window: Sequence[RequestRecord]) -> bool:
    return len(without_audio(window)) > MAX_ERROR_SHARE * len(window)


def goodput_ms(
    window: Sequence[RequestRecord], slo_ms: float, clock: RecordClock = ttfab
) -> list[float]:
    """Every request of the window on the `clock`, in start order; one without audio (or without
    a time on the clock) above the SLO, unless its listener hung up before the clock's moment
    (no speech yet, say): then when it reached the hang-up point."""
    return [
        at
        if delivered(r) and (at := clock(r)) is not None
        else r.latency_ms
        if delivered(r) and r.hung_up
        else max(r.latency_ms, NO_AUDIO_AT_SLO_TIMES * slo_ms)
        for r in sorted(window, key=lambda r: r.start_ns)
    ]


def judge(
    inputs: RungInputs,
    slo_ms: float,
    metric: SloMetric = "ttfab",
    reference: AudioReference | None = None,
) -> Rung:
    """Summaries and the verdict of one rung on the SLO's clock, in the artifact's shape."""
    window = inputs.window
    ok = [r for r in window if delivered(r)]
    no_audio = without_audio(window)
    clock = record_clock(metric, reference)
    reason = unusable_reason(inputs, slo_ms, clock) if window else "nothing_completed"
    goodput = goodput_ms(window, slo_ms, clock)
    goodput_p95 = summarize(goodput).p95
    goodput_ci = quantile_ci(goodput)
    # TTFAB's goodput p95 and interval are kept whatever the clock (the first screen shows them).
    ttfab_p95, ttfab_ci = goodput_p95, goodput_ci
    if metric != "ttfab":
        ttfab_goodput = goodput_ms(window, slo_ms)
        ttfab_p95, ttfab_ci = summarize(ttfab_goodput).p95, quantile_ci(ttfab_goodput)
    fail_reason = None
    if reason is None:
        if too_many_errors(window):
            fail_reason = "errors"
        elif goodput_p95 is not None and goodput_p95 > slo_ms:
            fail_reason = "slo"
    ttfab = [r.ttfab_ms for r in ok if r.ttfab_ms is not None]
    audio_total = sum(r.audio_s for r in ok)
    # Answers heard to their end: a hung-up one has neither the whole latency nor the whole audio.
    whole = [r for r in ok if not r.hung_up]
    # RTF as usual: wall time to synthesize (the whole answer) over the audio's duration; below 1
    # is faster than real time. It cannot explode when the audio arrives in one burst.
    rtf = [r.latency_ms / 1000.0 / r.audio_s for r in whole if r.audio_s > 0]
    audible = [r.audible_ms for r in ok if r.audible_ms is not None]
    speech = [r.speech_ms for r in ok if r.speech_ms is not None]
    glitch_free = [r.glitch_free_ms for r in ok if r.glitch_free_ms is not None]
    per_s = 1 / inputs.measure_s if inputs.measure_s > 0 else 0.0
    own_clock = metric != "ttfab"
    return Rung(
        concurrency=inputs.concurrency,
        usable=reason is None,
        unusable_reason=reason,
        meets_slo=reason is None and fail_reason is None,
        completed=len(ok),
        rejected=sum(1 for r in window if r.status == "rejected"),
        failed=len(no_audio),
        waited_past_bound=sum(1 for r in window if waited_past_bound(r)),
        hung_up=sum(1 for r in ok if r.hung_up),
        measure_s=inputs.measure_s,
        throughput_rps=len(ok) * per_s,
        concurrency_mean=inputs.concurrency_mean,
        concurrency_max=inputs.concurrency_max,
        ttfab_ms=summarize(ttfab),
        ttfab_p95_ci_ms=ttfab_ci,
        latency_ms=summarize([r.latency_ms for r in whole]),
        inter_chunk_gap_ms=summarize([g for r in ok for g in r.gaps_ms]),
        underrun_ms=summarize([r.underrun_ms for r in ok if r.underrun_ms is not None]),
        audio_s=summarize([r.audio_s for r in whole]),
        response_bytes=summarize([r.audio_bytes for r in whole]),
        rtf=summarize(rtf),
        audio_throughput=audio_total * per_s,
        phase=inputs.phase,  # type: ignore[arg-type]
        window_start=inputs.window_start,
        window_end=inputs.window_end,
        instance_count=inputs.instance_count,
        fail_reason=fail_reason,
        errors_by_kind=dict(sorted(Counter(failure_kind(r) for r in no_audio).items())),
        goodput_ttfab_p95_ms=ttfab_p95,
        audible_ms=summarize(audible) if audible else None,
        speech_ms=summarize(speech) if speech else None,
        glitch_free_ms=summarize(glitch_free) if glitch_free else None,
        chars_per_s=sum(r.text_chars for r in ok) * per_s,
        slo_metric=metric,
        slo_p95_ms=goodput_p95 if own_clock else None,
        slo_p95_ci_ms=goodput_ci if own_clock else None,
    )


def at_slo(rungs: Sequence[Rung], slo_ms: float) -> list[Rung]:
    """The rungs judged against another SLO on the same clock (a tier of a run's SLOs): a usable
    rung passes when its goodput p95 is within it; errors and word error rate fail it at any."""
    judged = []
    for rung in rungs:
        fail_reason = rung.fail_reason
        if rung.usable and fail_reason not in ("errors", "wer"):
            p95 = rung.judged_p95_ms
            fail_reason = "slo" if p95 is not None and p95 > slo_ms else None
        update = {"fail_reason": fail_reason, "meets_slo": rung.usable and fail_reason is None}
        judged.append(rung.model_copy(update=update))
    return judged


def straddles_slo(
    window: Sequence[RequestRecord], slo_ms: float, clock: RecordClock = ttfab
) -> Interval | None:
    """The goodput p95 interval on the `clock` when the SLO lies between its low end and the
    largest time it reaches (more data could flip the verdict), else None. An interval open above
    only for want of samples, with nothing seen near the SLO, is not held longer."""
    interval = quantile_ci(goodput_ms(window, slo_ms, clock))
    return interval if interval is not None and interval.low <= slo_ms <= interval.high else None


def clearly_above(rung: Rung, slo_ms: float) -> bool:
    """A failure more data would not turn into a pass: errors, or a p95 interval above the SLO."""
    interval = rung.judged_ci_ms
    return rung.fail_reason in ("errors", "wer") or (interval is not None and interval.low > slo_ms)


def word(rung: Rung) -> str:
    """`pass`, `fail:slo`, `unusable:not_settled`: what one measurement showed, for `earlier`."""
    if not rung.usable:
        return f"unusable:{rung.unusable_reason}"
    return "pass" if rung.meets_slo else f"fail:{rung.fail_reason}"


def standing(rung: Rung, rungs: Sequence[Rung], slo_ms: float) -> Standing:
    """Where a measured concurrency stands, given every rung of its run.

    A failure caps Q_max only when it is confirmed: it failed twice, or it failed clearly and no
    higher rung passed. Otherwise it is doubtful and is re-tested; a doubtful failure that
    cannot be measured again counts as a failure.
    """
    if not rung.usable:
        return "unusable"
    if rung.meets_slo:
        return "pass"
    if any(e.startswith("fail") for e in rung.earlier):
        return "fail"
    contradicted = any(
        r.meets_slo and r.concurrency > rung.concurrency and r.run == rung.run for r in rungs
    )
    if clearly_above(rung, slo_ms) and not contradicted:
        return "fail"
    return "fail" if rung.remeasured + 1 >= MAX_MEASUREMENTS else "doubtful"


def select_qmax(rungs: Sequence[Rung], slo_ms: float) -> tuple[int | None, bool]:
    """Q_max and whether it is bracketed.

    Q_max is the highest passing rung below the lowest confirmed failure; unusable rungs count
    neither way. It is bracketed only when a usable rung above it failed clearly (its p95
    interval above the SLO, or errors); no passing rung at all is never bracketed.
    """
    stands = {r.concurrency: (r, standing(r, rungs, slo_ms)) for r in rungs}
    caps = [c for c, (_, s) in stands.items() if s == "fail"]
    ceiling = min(caps) if caps else None
    passing = [
        c for c, (_, s) in stands.items() if s == "pass" and (ceiling is None or c < ceiling)
    ]
    if not passing:
        return None, False
    q_max = max(passing)
    bracketed = any(
        c > q_max and s == "fail" and clearly_above(r, slo_ms) for c, (r, s) in stands.items()
    )
    return q_max, bracketed


def holds_slo(rung: Rung, slo_ms: float) -> bool:
    """A judged rung whose p95 interval still contains the SLO: its pass or its latency failure
    could turn the other way with more data (errors are not a matter of more data)."""
    interval = rung.judged_ci_ms
    return (
        rung.usable
        and rung.fail_reason not in ("errors", "wer")
        and interval is not None
        and interval.low <= slo_ms <= interval.high
    )


def inconclusive_rungs(rungs: Sequence[Rung], q_max: int | None, slo_ms: float) -> list[int]:
    """The rungs the verdict rests on whose p95 interval still holds the SLO after extensions.

    The verdict rests on the Q_max rung (its pass) and the lowest usable rung above it (the
    failure that caps it); with no Q_max, on the lowest usable rung (the failure at the bottom).
    """
    usable = sorted((r for r in rungs if r.usable), key=lambda r: r.concurrency)
    floor = q_max or 0
    resting = [r for r in usable if r.concurrency == q_max]
    resting += [r for r in usable if r.concurrency > floor][:1]
    return sorted({r.concurrency for r in resting if holds_slo(r, slo_ms)})


def falls_in_p95(rungs: Sequence[Rung]) -> list[int]:
    """Concurrencies whose p95 (on the SLO's clock) lies wholly below that of a lower usable rung.

    A closed loop on a steady server cannot get faster with more requests in flight, so such a
    fall, beyond both confidence intervals, says the host or the endpoint changed during the run.
    """
    usable = sorted(
        (r for r in rungs if r.usable and r.judged_ci_ms is not None),
        key=lambda r: r.concurrency,
    )
    fallen: list[int] = []
    for index, rung in enumerate(usable):
        interval = rung.judged_ci_ms
        assert interval is not None
        lower = (r.judged_ci_ms for r in usable[:index] if r.concurrency < rung.concurrency)
        if interval.bounded_above and any(
            earlier is not None and interval.high < earlier.low for earlier in lower
        ):
            fallen.append(rung.concurrency)
    return fallen


def doubt_line(a: QmaxArtifact) -> str | None:
    """Why the answer is inconclusive and what would settle it; None when it is not."""
    if a.confirmation is not None and a.confirmation.outcome in DOUBTFUL:
        return confirmation_line(a.confirmation)
    by_c = {r.concurrency: r for r in a.rungs}
    held = [by_c[c] for c in a.inconclusive if c in by_c]
    if not held:
        return None
    parts = []
    for rung in held:
        interval = rung.judged_ci_ms
        assert interval is not None  # inconclusive_rungs keeps only rungs with an interval
        verdict = "pass" if rung.meets_slo else "failure"
        parts.append(
            f"N={rung.concurrency}'s {verdict} (p95 interval {interval.low:.0f}-"
            f"{interval.high:.0f} ms, after {rung.extensions} extension(s))"
        )
    measure = a.settings.get("measure_s")
    now = f" (this run: {measure:g} s)" if isinstance(measure, int | float) else ""
    verb = "holds" if len(parts) == 1 else "hold"
    return (
        f"qmax: INCONCLUSIVE: {'; '.join(parts)} still {verb} the SLO {a.slo_ms:g} ms: a longer "
        f"--measure-s{now} or a quieter host would settle it"
    )


def verdict_words(a: QmaxArtifact) -> str:
    """What the run found, in words that cannot contradict each other; INCONCLUSIVE when the
    rungs it rests on still hold the SLO inside their p95 interval (:func:`doubt_line`)."""
    words = _verdict(a)
    doubted = a.confirmation is not None and a.confirmation.outcome in DOUBTFUL
    return f"{words}, INCONCLUSIVE" if a.inconclusive or doubted else words


def _verdict(a: QmaxArtifact) -> str:
    failing = [r for r in a.rungs if r.usable and not r.meets_slo]
    if a.confirmation is not None and a.confirmation.outcome == "changed":
        return f"no Q_max: the server changed speed during the run ({change_words(a.confirmation)})"
    if a.q_max is None:
        if failing and all(r.fail_reason == "errors" for r in failing):
            kinds = sorted({k for r in failing for k in r.errors_by_kind})
            return f"no rung met the SLO: requests ended without audio ({', '.join(kinds)})"
        if not any(r.usable for r in a.rungs):
            return "no rung could be judged (every rung unusable)"
        return "no rung met the SLO"
    if a.q_max_bracketed:
        above = min(
            (r for r in failing if r.concurrency > (a.q_max or 0)), key=lambda r: r.concurrency
        )
        why = fail_words(above, a.slo_ms)
        return f"Q_max {a.q_max} (bracketed: N={above.concurrency} failed, {why})"
    return f"Q_max {a.q_max} (lower bound: no rung above it failed clearly)"


def fail_words(rung: Rung, slo_ms: float) -> str:
    if rung.fail_reason == "errors":
        share = 100.0 * rung.failed / max(1, rung.failed + rung.completed + rung.rejected)
        kinds = ", ".join(f"{k} {n}" for k, n in rung.errors_by_kind.items())
        what = (
            "with audio short or silent against N=1's"
            if (set(rung.errors_by_kind) <= AUDIO_ERRORS)
            else "without audio"
        )
        return f"{share:.1f}% of requests {what}: {kinds}"
    if rung.fail_reason == "wer":
        return (
            f"word error rate {rung.wer or 0.0:.2f} against {rung.wer_at_c1 or 0.0:.2f} at N=1 "
            f"({rung.wer_sampled} answers transcribed)"
        )
    p95 = rung.judged_p95_ms or 0.0
    return f"p95 {CLOCK_WORDS[rung.slo_metric]} {p95:.0f} ms > SLO {slo_ms:g} ms"
