"""Is the server still the one that was measured? (docs/method.md#the-answer-confirmed). Pure.

The search's final pair (N passes, N+1 fails) was measured at different times; a server whose
speed changed between them yields a pair from two servers. Before the verdict the passing rung
is measured once more, last, and held against its first measurement.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_tts_scaling.core.schema import Confirmation, Rung
from pytest_tts_scaling.core.spelling import both_flags

# A move of p95 TTFAB beyond both intervals smaller than this share of the SLO is noise, not a
# changed server (the floor the not-settled check uses within a rung).
CHANGE_FLOOR_SHARE = 0.1
# Outcomes that leave the verdict unsettled: the pair no longer stands for one server.
DOUBTFUL = frozenset({"changed", "not_repeated"})


def confirmation_concurrency(
    rungs: Sequence[Rung], q_max: int | None, bracketed: bool
) -> int | None:
    """The rung to measure once more: Q_max of a bracketed answer, unless its pass is already
    the run's last measurement (`rungs` in the order they were last measured)."""
    if q_max is None or not bracketed or not rungs or rungs[-1].concurrency == q_max:
        return None
    return q_max


def moved(before: Rung, after: Rung, slo_ms: float) -> bool:
    """p95 moved beyond both intervals by more than the noise floor."""
    b, a = before.judged_p95_ms, after.judged_p95_ms
    first, again = before.judged_ci_ms, after.judged_ci_ms
    if b is None or a is None or first is None or again is None:
        return False
    apart = again.low > first.high if a > b else first.low > again.high
    return apart and abs(a - b) > CHANGE_FLOOR_SHARE * slo_ms


def beyond_client_lateness(before: Rung, after: Rung, slo_ms: float) -> bool:
    """A second measurement the client could not keep time in still shows a changed server when
    its p95 moved by more than the noise floor plus the client's worst lateness: every time the
    client took was late by at most that much (a busy host's client, not the server, is slow)."""
    client = after.client
    if after.unusable_reason != "client_saturated" or client is None or client.lag_max_ms is None:
        return False
    b, a = before.judged_p95_ms, after.judged_p95_ms
    if b is None or a is None or not moved(before, after, slo_ms):
        return False
    return abs(a - b) > CHANGE_FLOOR_SHARE * slo_ms + client.lag_max_ms


def judge_confirmation(before: Rung, after: Rung, slo_ms: float) -> Confirmation:
    """What the second measurement of the answer's passing rung says about the server."""
    if not after.usable:
        outcome = "changed" if beyond_client_lateness(before, after, slo_ms) else "not_repeated"
    elif moved(before, after, slo_ms):
        slower = (after.judged_p95_ms or 0.0) > (before.judged_p95_ms or 0.0)
        outcome = "slowed" if slower and after.meets_slo else "changed"
    else:
        outcome = "held" if after.meets_slo else "not_repeated"
    return Confirmation(
        concurrency=before.concurrency,
        outcome=outcome,  # type: ignore[arg-type]
        before_p95_ms=before.judged_p95_ms,
        rung=after,
    )


def change_words(c: Confirmation) -> str:
    """`N=6 p95 270 → 520 ms`, or why the second measurement has no p95 to compare."""
    after = c.rung
    if c.outcome == "not_repeated" and not after.usable:
        return f"N={c.concurrency} unusable when measured again ({after.unusable_reason})"
    before = "n/a" if c.before_p95_ms is None else f"{c.before_p95_ms:.0f}"
    now = after.judged_p95_ms
    return f"N={c.concurrency} p95 {before} → {'n/a' if now is None else f'{now:.0f}'} ms"


def confirmation_line(c: Confirmation) -> str | None:
    """What the confirmation found, for the summary and the report; None when it held."""
    if c.outcome == "held":
        return None
    words = change_words(c)
    if c.outcome == "slowed":
        return (
            f"qmax: the server slowed during the run ({words}) but N={c.concurrency} still "
            "passes: the failure above it, measured on the faster server, holds for it as it is "
            "now"
        )
    if c.outcome == "changed":
        return (
            f"qmax: INCONCLUSIVE: the server changed speed during the run ({words}): the pair "
            "came from two servers; re-run when it holds still (a GPU that throttles, a leak, a "
            "neighbour on the host)"
        )
    return (
        f"qmax: INCONCLUSIVE: N={c.concurrency}'s pass did not repeat when measured again last "
        f"({words}): a longer {both_flags('--measure-s')} or a quieter host would settle it"
    )
