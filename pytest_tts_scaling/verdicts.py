"""Rung verdicts, Q_max and the ladder's schedule (SPEC §4 qmax). Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tts_scaling.records import RequestRecord
from pytest_tts_scaling.schema import Rung
from pytest_tts_scaling.stats import quantile_ci, relative_drift, summarize

# A closed loop whose time-weighted in-flight is more than this far below N did not hold N.
CLIENT_SHORTFALL = 0.05
# More rejections than this share of answers means the admission gate, not latency, set the rung.
MAX_REJECTED_SHARE = 0.01
# TTFAB whose median moved by more than this factor across the window had not settled.
DRIFT_FACTOR = 1.5
# A failing rung count after which the ladder stops climbing.
FAILS_TO_STOP = 2


@dataclass(frozen=True)
class RungInputs:
    """What one rung measured, already cut to its window."""

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


def unusable_reason(inputs: RungInputs) -> str | None:
    """Why a rung cannot be judged against the SLO, or None when it can (SPEC §4)."""
    ok = [r for r in inputs.window if r.status == "ok"]
    rejected = sum(1 for r in inputs.window if r.status == "rejected")
    answered = len(inputs.window)
    if inputs.instance_count_changed:
        return "instance_count_changed"
    lag, bound = inputs.client_lag_p99_ms, inputs.client_lag_bound_ms
    if lag is not None and bound is not None and lag > bound:
        return "client_saturated"
    if not ok:
        return "nothing_completed"
    if answered and rejected / answered > MAX_REJECTED_SHARE:
        return "gate_limited"
    if inputs.concurrency_mean < (1 - CLIENT_SHORTFALL) * inputs.concurrency:
        return "client_could_not_hold"
    ttfab = [r.ttfab_ms for r in ok if r.ttfab_ms is not None]
    drift = relative_drift([r.start_ns for r in ok if r.ttfab_ms is not None], ttfab)
    if drift > DRIFT_FACTOR or drift < 1 / DRIFT_FACTOR:
        return "not_settled"
    return None


def judge(inputs: RungInputs, slo_ms: float) -> Rung:
    """Summaries and the verdict of one rung, in the artifact's shape."""
    ok = [r for r in inputs.window if r.status == "ok"]
    ttfab = [r.ttfab_ms for r in ok if r.ttfab_ms is not None]
    reason = unusable_reason(inputs)
    ttfab_summary = summarize(ttfab)
    audio_total = sum(r.audio_s for r in ok)
    rtf = [
        r.audio_s / ((r.latency_ms - r.ttfab_ms) / 1000.0)
        for r in ok
        if r.ttfab_ms is not None and r.latency_ms > r.ttfab_ms
    ]
    return Rung(
        concurrency=inputs.concurrency,
        usable=reason is None,
        unusable_reason=reason,
        meets_slo=reason is None and ttfab_summary.p95 is not None and ttfab_summary.p95 <= slo_ms,
        completed=len(ok),
        rejected=sum(1 for r in inputs.window if r.status == "rejected"),
        failed=sum(1 for r in inputs.window if r.status in ("error", "timeout")),
        measure_s=inputs.measure_s,
        throughput_rps=len(ok) / inputs.measure_s if inputs.measure_s > 0 else 0.0,
        concurrency_mean=inputs.concurrency_mean,
        concurrency_max=inputs.concurrency_max,
        ttfab_ms=ttfab_summary,
        ttfab_p95_ci_ms=quantile_ci(ttfab),
        latency_ms=summarize([r.latency_ms for r in ok]),
        inter_chunk_gap_ms=summarize([g for r in ok for g in r.gaps_ms]),
        underrun_ms=summarize([r.underrun_ms for r in ok if r.underrun_ms is not None]),
        audio_s=summarize([r.audio_s for r in ok]),
        response_bytes=summarize([r.audio_bytes for r in ok]),
        rtf=summarize(rtf),
        audio_throughput=audio_total / inputs.measure_s if inputs.measure_s > 0 else 0.0,
        phase=inputs.phase,  # type: ignore[arg-type]
        window_start=inputs.window_start,
        window_end=inputs.window_end,
        instance_count=inputs.instance_count,
    )


def straddles_slo(window: Sequence[RequestRecord], slo_ms: float) -> bool:
    """True when the p95 TTFAB's confidence interval contains the SLO: more data could flip it."""
    ttfab = [r.ttfab_ms for r in window if r.status == "ok" and r.ttfab_ms is not None]
    interval = quantile_ci(ttfab)
    return interval is not None and interval.low <= slo_ms <= interval.high


def select_qmax(rungs: Sequence[Rung]) -> tuple[int | None, bool]:
    """Q_max and whether it is bracketed.

    Q_max is the highest passing rung below the lowest failing one: a pass above a failure is
    not trusted (it would mean the failure was noise, which the schedule then refines). It is
    bracketed when a higher rung was measured and failed; otherwise it is a lower bound.
    """
    failing = sorted(r.concurrency for r in rungs if not r.meets_slo)
    ceiling = failing[0] if failing else None
    passing = [
        r.concurrency for r in rungs if r.meets_slo and (ceiling is None or r.concurrency < ceiling)
    ]
    if not passing:
        return None, ceiling is not None
    return max(passing), ceiling is not None


def next_concurrency(
    ladder: Sequence[int], rungs: Sequence[Rung], refine: bool = True
) -> int | None:
    """The next rung to measure given what has been measured, or None when done.

    Climb the ladder until two rungs fail; then bisect between the highest pass and the lowest
    fail above it until they are one request apart.
    """
    measured = {r.concurrency for r in rungs}
    fails = sum(1 for r in rungs if not r.meets_slo)
    if fails < FAILS_TO_STOP:
        for rung in ladder:
            if rung not in measured:
                return rung
    if not refine:
        return None
    q_max, _ = select_qmax(rungs)
    failing = sorted(r.concurrency for r in rungs if not r.meets_slo)
    above = [c for c in failing if q_max is None or c > q_max]
    if not above:
        return None
    low = q_max if q_max is not None else 0
    high = above[0]
    if high - low <= 1:
        return None
    middle = (low + high) // 2
    return middle if middle not in measured and middle >= 1 else None


def schedule_estimate_s(ladder: Sequence[int], hold_s: float, gap_s: float) -> float:
    """Wall-clock of the whole ladder if every rung passes (the longest case without refining)."""
    return len(ladder) * hold_s + max(0, len(ladder) - 1) * gap_s
