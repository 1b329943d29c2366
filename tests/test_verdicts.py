from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from pytest_tts_scaling.core.records import RequestRecord, RequestStatus
from pytest_tts_scaling.core.schema import Interval, Rung
from pytest_tts_scaling.core.search import next_step
from pytest_tts_scaling.core.verdicts import (
    RungInputs,
    clearly_above,
    goodput_ms,
    judge,
    record_clock,
    select_qmax,
    standing,
    straddles_slo,
    unusable_reason,
)
from tests.factories import make_record, make_rung


def record(
    i: int, ttfab: float | None = 100.0, status: RequestStatus = "ok", error_code: str | None = None
) -> RequestRecord:
    return make_record(
        i * 1_000_000,
        ttfab_ms=ttfab,
        request_id=str(i),
        status=status,
        error_code=error_code,
        latency_ms=500.0,
        audio_bytes=48000,
        audio_s=1.0,
        underrun_ms=0.0,
        gaps_ms=(10.0,),
        voice="af_heart",
        text_chars=10,
    )


def inputs(
    window: list[RequestRecord],
    concurrency: int = 4,
    mean: float = 4.0,
    *,
    instance_count_changed: bool = False,
) -> RungInputs:
    return RungInputs(
        concurrency=concurrency,
        window=window,
        measure_s=10.0,
        concurrency_mean=mean,
        concurrency_max=concurrency,
        instance_count_changed=instance_count_changed,
    )


def test_usable_rung_and_slo() -> None:
    window = [record(i) for i in range(50)]
    rung = judge(inputs(window), slo_ms=200)
    assert rung.usable
    assert rung.meets_slo
    assert rung.completed == 50
    assert rung.throughput_rps == 5.0
    assert rung.ttfab_ms.p95 == 100.0
    assert not judge(inputs(window), slo_ms=50).meets_slo


@pytest.mark.parametrize(
    ("window", "kwargs", "reason"),
    [
        (
            [record(i) for i in range(20)],
            {"instance_count_changed": True},
            "instance_count_changed",
        ),
        ([record(i, status="error") for i in range(5)], {}, "nothing_completed"),
        (
            [record(i) for i in range(95)] + [record(i, status="rejected") for i in range(5)],
            {},
            "gate_limited",
        ),
        ([record(i) for i in range(20)], {"mean": 3.7}, "client_could_not_hold"),
        ([record(i, ttfab=100.0 + 50 * i) for i in range(30)], {}, "not_settled"),
    ],
)
def test_unusable_reasons(window: list[RequestRecord], kwargs: dict[str, Any], reason: str) -> None:
    assert unusable_reason(inputs(window, **kwargs), 10_000) == reason
    rung = judge(inputs(window, **kwargs), slo_ms=10_000)
    assert not rung.meets_slo
    assert rung.fail_reason is None  # unusable is not a failure


def test_one_percent_rejections_is_still_usable() -> None:
    window = [record(i) for i in range(99)] + [record(99, status="rejected")]
    assert unusable_reason(inputs(window), 1000) is None


def test_steady_waves_of_a_slot_server_are_settled_and_a_small_trend_is_not_a_drift() -> None:
    # 4 slots, N=5: one request in five waits a wave; TTFAB 50 or 150 ms, steady.
    waves = [record(i, ttfab=150.0 if i % 5 == 4 else 50.0) for i in range(100)]
    assert unusable_reason(inputs(waves, concurrency=5, mean=5.0), 400) is None
    # Sub-millisecond creep is far below the floor (a tenth of the SLO).
    creep = [record(i, ttfab=2.0 + 0.005 * i) for i in range(100)]
    assert unusable_reason(inputs(creep), 400) is None
    # A queue that keeps growing is not settled at any SLO it matters to.
    growing = [record(i, ttfab=100.0 + 5 * i) for i in range(100)]
    assert unusable_reason(inputs(growing), 400) == "not_settled"


def test_errors_count_in_the_p95_and_fail_the_rung_by_kind() -> None:
    # 1 request in 10 ends with headers and no audio: the old verdict passed this rung.
    window = [
        record(i, ttfab=None, status="error", error_code="no_audio") if i % 10 == 9 else record(i)
        for i in range(200)
    ]
    rung = judge(inputs(window), slo_ms=500)
    assert rung.usable
    assert not rung.meets_slo
    assert rung.fail_reason == "errors"
    assert rung.errors_by_kind == {"no_audio": 20}
    assert rung.failed == 20
    assert rung.ttfab_ms.p95 == 100.0  # delivered audio alone looks fine
    assert rung.goodput_ttfab_p95_ms == 1000.0  # the failures, counted above the SLO
    assert rung.ttfab_p95_ci_ms is not None
    assert rung.ttfab_p95_ci_ms.low > 500


def test_a_few_errors_are_tolerated_but_still_count_in_the_p95() -> None:
    timeouts = [record(i, ttfab=None, status="timeout", error_code="stalled") for i in range(1)]
    window = [record(i, ttfab=float(i % 100)) for i in range(199)] + timeouts
    rung = judge(inputs(window), slo_ms=500)
    assert rung.meets_slo
    assert rung.errors_by_kind == {"stalled": 1}
    assert rung.goodput_ttfab_p95_ms is not None
    assert rung.ttfab_ms.p95 is not None
    assert rung.goodput_ttfab_p95_ms >= rung.ttfab_ms.p95
    # An ok answer without audio bytes is a failure too.
    silent = [*window[:-1], record(199, ttfab=None)]
    assert judge(inputs(silent), slo_ms=500).errors_by_kind == {"no_audio": 1}


def test_a_request_that_waited_past_the_bound_is_slow_not_an_error() -> None:
    # A one-slot server with a queue: 2% of requests were cut waiting for their first audio while
    # the endpoint answered the others. They count above the SLO, not as errors.
    waited = [
        record(i, ttfab=None, status="timeout", error_code="waited_past_bound") for i in range(4)
    ]
    window = [record(i, ttfab=float(i % 100)) for i in range(196)] + waited
    passing = judge(inputs(window), slo_ms=500)
    assert (passing.meets_slo, passing.failed, passing.waited_past_bound) == (True, 0, 4)
    assert passing.errors_by_kind == {}
    # More than 5% of them: the p95 is past the SLO and the rung fails for it, not for errors.
    many = [record(i, ttfab=50.0) for i in range(80)] + [
        record(80 + i, ttfab=None, status="timeout", error_code="waited_past_bound")
        for i in range(20)
    ]
    failing = judge(inputs(many), slo_ms=500)
    assert (failing.usable, failing.fail_reason, failing.failed) == (True, "slo", 0)
    # Every request waited: a clear failure, not a rung where nothing could be measured.
    queue = [
        record(i, ttfab=None, status="timeout", error_code="waited_past_bound") for i in range(40)
    ]
    swamped = judge(inputs(queue), slo_ms=500)
    assert (swamped.usable, swamped.fail_reason) == (True, "slo")
    assert clearly_above(swamped, 500)


SLO = 1000.0


def rung(c: int, passes: bool, *, low: float | None = None, **update: object) -> Rung:
    """A usable rung; a failing one has its p95 interval above the SLO unless `low` says."""
    made = make_rung(c, meets_slo=passes)
    fields: dict[str, object] = {"fail_reason": None if passes else "slo", **update}
    if not passes:
        fields["ttfab_p95_ci_ms"] = Interval(low=SLO + 1 if low is None else low, high=2 * SLO)
    return made.model_copy(update=fields)


def unusable(c: int, reason: str = "not_settled", **update: object) -> Rung:
    return make_rung(c, meets_slo=False).model_copy(
        update={"usable": False, "unusable_reason": reason, **update}
    )


def test_select_qmax() -> None:
    assert select_qmax([], SLO) == (None, False)
    assert select_qmax([rung(1, True), rung(5, True)], SLO) == (5, False)
    assert select_qmax([rung(1, True), rung(5, True), rung(10, False)], SLO) == (5, True)
    # No passing rung is never "bracketed".
    assert select_qmax([rung(1, False)], SLO) == (None, False)


def test_an_unusable_rung_is_neither_a_failure_nor_a_bracket() -> None:
    rungs = [rung(1, True), rung(5, True), unusable(6)]
    assert select_qmax(rungs, SLO) == (5, False)
    assert standing(rungs[2], rungs, SLO) == "unusable"


def test_a_failure_caps_only_once_confirmed() -> None:
    # A clear failure below a pass is contradicted: doubtful until re-tested.
    noisy = [rung(1, True), rung(5, False), rung(10, True)]
    assert standing(noisy[1], noisy, SLO) == "doubtful"
    # Re-tested and passing: the failure was noise; Q_max is not capped by it.
    retested = [rung(1, True), rung(10, True), rung(5, True, remeasured=1, earlier=["fail:slo"])]
    assert select_qmax(retested, SLO) == (10, False)
    # Failed twice: it caps, whatever passed above it.
    twice = [rung(1, True), rung(10, True), rung(5, False, remeasured=1, earlier=["fail:slo"])]
    assert standing(twice[2], twice, SLO) == "fail"
    assert select_qmax(twice, SLO) == (1, True)
    # A failure whose interval holds the SLO is doubtful; twice so, it caps but brackets not.
    straddling = [rung(1, True), rung(2, False, low=SLO - 10)]
    assert standing(straddling[1], straddling, SLO) == "doubtful"
    again = [rung(1, True), rung(2, False, low=SLO - 10, remeasured=1, earlier=["fail:slo"])]
    assert select_qmax(again, SLO) == (1, False)


def climb(ladder: tuple[int, ...], passes: Callable[[int], bool]) -> list[int]:
    measured: list[Rung] = []
    while (step := next_step(measured, SLO, ladder=ladder, max_concurrency=256)) is not None:
        measured.append(rung(step.concurrency, passes(step.concurrency)))
        assert len(measured) < 50
    return [r.concurrency for r in measured]


def test_schedule_stops_after_two_fails_then_bisects_to_one_request() -> None:
    order = climb((1, 2, 4, 8, 12, 16, 32), lambda c: c <= 10)
    assert order == [1, 2, 4, 8, 12, 16, 10, 11]
    order = climb((1, 5, 10, 20, 30, 40, 50, 60), lambda c: c <= 37)
    assert order[:7] == [1, 5, 10, 20, 30, 40, 50]
    measured = [rung(c, c <= 37) for c in order]
    assert select_qmax(measured, SLO) == (37, True)


def test_schedule_when_nothing_fails_or_everything_fails() -> None:
    assert climb((1, 2, 4), lambda c: True) == [1, 2, 4]
    assert climb((1, 2, 4), lambda c: False) == [1, 2]


def test_schedule_refines_below_the_first_rung() -> None:
    order = climb((4, 8), lambda c: c <= 2)
    measured = [rung(c, c <= 2) for c in order]
    assert select_qmax(measured, SLO) == (2, True)
    assert order[:2] == [4, 8]


def test_straddles_slo() -> None:
    wide = [record(i, ttfab=float(900 + i * 5)) for i in range(41)]
    assert straddles_slo(wide, slo_ms=1080)
    assert not straddles_slo(wide, slo_ms=500)
    # Open above for want of samples, but nothing seen near the SLO: not held longer.
    assert not straddles_slo(wide, slo_ms=2000)


def test_rtf_is_wall_time_over_audio_even_when_audio_arrives_in_one_burst() -> None:
    # 500 ms for 1 s of audio, all of it in the last millisecond: RTF 0.5, not audio / 1 ms.
    burst = [dataclasses.replace(record(i, ttfab=499.0), gaps_ms=()) for i in range(20)]
    rtf = judge(inputs(burst), slo_ms=1000).rtf
    assert rtf is not None
    assert rtf.p50 == pytest.approx(0.5)
    assert rtf.max == pytest.approx(0.5)


def test_a_hung_up_request_is_served_at_its_hang_up_point_on_a_clock_it_never_reached() -> None:
    """Without a time on the SLO's clock (hung up before the clock's moment), a hung-up request
    counts when it reached the hang-up point, not as a request without audio; one heard whole
    without that time still does."""
    hung = make_record(0, ttfab_ms=100.0, latency_ms=400.0, hung_up=True)
    silent = make_record(1, ttfab_ms=100.0, latency_ms=400.0)
    clock = record_clock("playback")
    assert goodput_ms([hung, silent], 1000.0, clock) == [400.0, 2000.0]
    assert goodput_ms([dataclasses.replace(hung, glitch_free_ms=150.0)], 1000.0, clock) == [150.0]
