from __future__ import annotations

from collections.abc import Callable

import pytest
from factories import make_rung

from pytest_tts_scaling.records import RequestRecord
from pytest_tts_scaling.schema import Rung
from pytest_tts_scaling.verdicts import (
    RungInputs,
    judge,
    next_concurrency,
    select_qmax,
    straddles_slo,
    unusable_reason,
)


def record(i: int, ttfab: float | None = 100.0, status: str = "ok") -> RequestRecord:
    return RequestRecord(
        request_id=str(i),
        rung=1,
        worker=0,
        start_ns=i * 1_000_000,
        end_ns=i * 1_000_000 + 1,
        status=status,
        error_code=None,
        http_status=200,
        ttfab_ms=ttfab,
        latency_ms=500.0,
        audio_bytes=48000,
        audio_s=1.0,
        underrun_ms=0.0,
        gaps_ms=(10.0,),
        voice="af_heart",
        text_chars=10,
        epoch_start_ns=0,
    )  # type: ignore[arg-type]


def inputs(
    window: list[RequestRecord], concurrency: int = 4, mean: float = 4.0, **kw: object
) -> RungInputs:
    return RungInputs(
        concurrency=concurrency,
        window=window,
        measure_s=10.0,
        concurrency_mean=mean,
        concurrency_max=concurrency,
        **kw,
    )  # type: ignore[arg-type]


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
def test_unusable_reasons(
    window: list[RequestRecord], kwargs: dict[str, object], reason: str
) -> None:
    assert unusable_reason(inputs(window, **kwargs)) == reason  # type: ignore[arg-type]
    assert not judge(inputs(window, **kwargs), slo_ms=10_000).meets_slo  # type: ignore[arg-type]


def test_one_percent_rejections_is_still_usable() -> None:
    window = [record(i) for i in range(99)] + [record(99, status="rejected")]
    assert unusable_reason(inputs(window)) is None


def rung(c: int, passes: bool) -> Rung:
    return make_rung(c, meets_slo=passes)


def test_select_qmax() -> None:
    assert select_qmax([]) == (None, False)
    assert select_qmax([rung(1, True), rung(5, True)]) == (5, False)
    assert select_qmax([rung(1, True), rung(5, True), rung(10, False)]) == (5, True)
    assert select_qmax([rung(1, False)]) == (None, True)
    # A pass above a failure is not trusted.
    assert select_qmax([rung(1, True), rung(5, False), rung(10, True)]) == (1, True)


def climb(ladder: tuple[int, ...], passes: Callable[[int], bool]) -> list[int]:
    measured: list[Rung] = []
    while (c := next_concurrency(ladder, measured)) is not None:
        measured.append(rung(c, passes(c)))
        assert len(measured) < 50
    return [r.concurrency for r in measured]


def test_schedule_stops_after_two_fails_then_bisects_to_one_request() -> None:
    order = climb((1, 2, 4, 8, 12, 16, 32), lambda c: c <= 10)
    assert order == [1, 2, 4, 8, 12, 16, 10, 11]
    order = climb((1, 5, 10, 20, 30, 40, 50, 60), lambda c: c <= 37)
    assert order[:7] == [1, 5, 10, 20, 30, 40, 50]
    measured = [rung(c, c <= 37) for c in order]
    assert select_qmax(measured) == (37, True)


def test_schedule_when_nothing_fails_or_everything_fails() -> None:
    assert climb((1, 2, 4), lambda c: True) == [1, 2, 4]
    assert climb((1, 2, 4), lambda c: False) == [1, 2]


def test_schedule_refines_below_the_first_rung() -> None:
    order = climb((4, 8), lambda c: c <= 2)
    measured = [rung(c, c <= 2) for c in order]
    assert select_qmax(measured) == (2, True)
    assert order[:2] == [4, 8]


def test_straddles_slo() -> None:
    wide = [record(i, ttfab=float(900 + i * 5)) for i in range(41)]
    assert straddles_slo(wide, slo_ms=1080)
    assert not straddles_slo(wide, slo_ms=2000)
    assert not straddles_slo(wide, slo_ms=500)
