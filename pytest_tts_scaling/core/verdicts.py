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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_tts_scaling.core.audio import AUDIO_ERRORS
from pytest_tts_scaling.core.records import WAITED_PAST_BOUND, RequestRecord
from pytest_tts_scaling.core.schema import Interval, QmaxArtifact, Rung
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


def unusable_reason(inputs: RungInputs, slo_ms: float) -> str | None:
    """Why a rung cannot be judged against the SLO, or None when it can
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
    change, noise = trend([r.start_ns for r in ok], [r.ttfab_ms or 0.0 for r in ok])
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


def goodput_ttfab_ms(window: Sequence[RequestRecord], slo_ms: float) -> list[float]:
    """TTFAB of every request of the window in start order; one without audio above the SLO."""
    return [
        r.ttfab_ms
        if delivered(r) and r.ttfab_ms is not None
        else max(r.latency_ms, NO_AUDIO_AT_SLO_TIMES * slo_ms)
        for r in sorted(window, key=lambda r: r.start_ns)
    ]


def judge(inputs: RungInputs, slo_ms: float) -> Rung:
    """Summaries and the verdict of one rung, in the artifact's shape."""
    window = inputs.window
    ok = [r for r in window if delivered(r)]
    no_audio = without_audio(window)
    reason = unusable_reason(inputs, slo_ms) if window else "nothing_completed"
    goodput = goodput_ttfab_ms(window, slo_ms)
    goodput_p95 = summarize(goodput).p95
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
    per_s = 1 / inputs.measure_s if inputs.measure_s > 0 else 0.0
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
        ttfab_p95_ci_ms=quantile_ci(goodput),
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
        goodput_ttfab_p95_ms=goodput_p95,
        audible_ms=summarize(audible) if audible else None,
    )


def straddles_slo(window: Sequence[RequestRecord], slo_ms: float) -> Interval | None:
    """The goodput p95 interval when the SLO lies between its low end and the largest TTFAB it
    reaches (more data could flip the verdict), else None. An interval open above only for want
    of samples, with nothing seen near the SLO, is not held longer."""
    interval = quantile_ci(goodput_ttfab_ms(window, slo_ms))
    return interval if interval is not None and interval.low <= slo_ms <= interval.high else None


def clearly_above(rung: Rung, slo_ms: float) -> bool:
    """A failure more data would not turn into a pass: errors, or a p95 interval above the SLO."""
    interval = rung.ttfab_p95_ci_ms
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
    interval = rung.ttfab_p95_ci_ms
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
    """Concurrencies whose p95 TTFAB lies wholly below that of a lower usable rung.

    A closed loop on a steady server cannot get faster with more requests in flight, so such a
    fall, beyond both confidence intervals, says the host or the endpoint changed during the run.
    """
    usable = sorted(
        (r for r in rungs if r.usable and r.ttfab_p95_ci_ms is not None),
        key=lambda r: r.concurrency,
    )
    fallen: list[int] = []
    for index, rung in enumerate(usable):
        interval = rung.ttfab_p95_ci_ms
        assert interval is not None
        lower = (r.ttfab_p95_ci_ms for r in usable[:index] if r.concurrency < rung.concurrency)
        if interval.bounded_above and any(
            earlier is not None and interval.high < earlier.low for earlier in lower
        ):
            fallen.append(rung.concurrency)
    return fallen


def doubt_line(a: QmaxArtifact) -> str | None:
    """Why the answer is inconclusive and what would settle it; None when it is not."""
    by_c = {r.concurrency: r for r in a.rungs}
    held = [by_c[c] for c in a.inconclusive if c in by_c]
    if not held:
        return None
    parts = []
    for rung in held:
        interval = rung.ttfab_p95_ci_ms
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
    return f"{words}, INCONCLUSIVE" if a.inconclusive else words


def _verdict(a: QmaxArtifact) -> str:
    failing = [r for r in a.rungs if r.usable and not r.meets_slo]
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
    p95 = rung.goodput_ttfab_p95_ms or rung.ttfab_ms.p95 or 0.0
    return f"p95 TTFAB {p95:.0f} ms > SLO {slo_ms:g} ms"
