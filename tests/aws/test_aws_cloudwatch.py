"""The CloudWatch join: cw_max and cw_ratio per rung, waiting (bounded) for the metric's lag."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

from datetime import UTC, datetime, timedelta

from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.cloudwatch import MAX_LAG_S, annotate_rungs, period_for
from pytest_tts_scaling.core.schema import Rung, Summary
from pytest_tts_scaling.core.timeline import parse_iso as parse_time
from tests.aws.aws_helpers import FakeClock, put_concurrency, unique
from tests.factories import make_rung

EMPTY = Summary(
    count=0, mean=None, min=None, max=None, std=None, p50=None, p90=None, p95=None, p99=None
)


def rung(concurrency: int, mean: float, start: datetime | None, end: datetime | None) -> Rung:
    return make_rung(
        concurrency,
        completed=10,
        measure_s=60.0,
        concurrency_mean=mean,
        ttfab_ms=EMPTY,
        latency_ms=EMPTY,
        window_start=start.isoformat().replace("+00:00", "Z") if start else None,
        window_end=end.isoformat().replace("+00:00", "Z") if end else None,
    )


def windows(now: datetime) -> tuple[datetime, datetime, datetime, datetime]:
    base = now.replace(microsecond=0) - timedelta(minutes=20)
    return (
        base,
        base + timedelta(seconds=60),
        base + timedelta(seconds=120),
        base + timedelta(seconds=180),
    )


def series(start: datetime, end: datetime, value: float) -> list[tuple[datetime, float]]:
    points = []
    at = start + timedelta(seconds=1)
    while at < end:
        points.append((at, value))
        at += timedelta(seconds=10)
    return points


def test_ratio_per_rung_from_the_window_maximum(clients: AwsClients) -> None:
    endpoint = unique()
    now = datetime.now(UTC)
    s1, e1, s2, e2 = windows(now)
    put_concurrency(
        endpoint, "AllTraffic", [*series(s1, e1, 5.0), (s1 + timedelta(seconds=31), 5.4)]
    )
    put_concurrency(endpoint, "AllTraffic", series(s2, e2, 9.0))
    # Outside both windows: must not count.
    put_concurrency(endpoint, "AllTraffic", [(e2 + timedelta(seconds=90), 50.0)])
    fake = FakeClock(start=now)
    rungs = [rung(5, 4.5, s1, e1), rung(10, 9.0, s2, e2), rung(20, 18.0, None, None)]
    out = annotate_rungs(
        clients.cloudwatch, rungs, endpoint=endpoint, variant="AllTraffic", clock=fake.clock()
    )
    assert out[0].cw_max == 5.4
    assert out[0].cw_ratio == pytest.approx(5.4 / 4.5)
    assert out[1].cw_max == 9.0
    assert out[1].cw_ratio == 1.0
    assert out[2].cw_max is None
    assert out[2].cw_ratio is None
    assert fake.sleeps == []  # the data was complete: no wait
    assert rungs[0].cw_ratio is None  # inputs are not modified


def test_waits_for_the_metric_lag(clients: AwsClients) -> None:
    endpoint = unique()
    now = datetime.now(UTC)
    start, end = now - timedelta(seconds=70), now - timedelta(seconds=10)

    def metric_arrives(sleeps: int) -> None:
        if sleeps == 3:
            put_concurrency(endpoint, "AllTraffic", series(start, end, 7.0))

    fake = FakeClock(start=now, on_sleep=metric_arrives)
    lines: list[str] = []
    out = annotate_rungs(
        clients.cloudwatch,
        [rung(7, 7.0, start, end)],
        endpoint=endpoint,
        variant="AllTraffic",
        clock=fake.clock(),
        log=lines.append,
        poll_s=20.0,
    )
    assert len(fake.sleeps) == 3
    assert out[0].cw_max == 7.0
    assert out[0].cw_ratio == 1.0
    assert any("waiting up to" in line for line in lines)


def test_partial_data_is_waited_for_until_it_reaches_the_window_end(clients: AwsClients) -> None:
    endpoint = unique()
    now = datetime.now(UTC)
    start, end = now - timedelta(seconds=120), now - timedelta(seconds=10)
    middle = start + timedelta(seconds=60)
    put_concurrency(endpoint, "AllTraffic", series(start, middle, 4.0))

    def rest_arrives(sleeps: int) -> None:
        if sleeps == 1:
            put_concurrency(endpoint, "AllTraffic", series(middle, end, 6.0))

    fake = FakeClock(start=now, on_sleep=rest_arrives)
    out = annotate_rungs(
        clients.cloudwatch,
        [rung(5, 5.0, start, end)],
        endpoint=endpoint,
        variant="AllTraffic",
        clock=fake.clock(),
    )
    assert len(fake.sleeps) == 1
    assert out[0].cw_max == 6.0


def test_wait_is_bounded_when_the_metric_never_comes(clients: AwsClients) -> None:
    endpoint = unique()
    now = datetime.now(UTC)
    start, end = now - timedelta(seconds=60), now
    fake = FakeClock(start=now)
    lines: list[str] = []
    out = annotate_rungs(
        clients.cloudwatch,
        [rung(3, 3.0, start, end)],
        endpoint=endpoint,
        variant="AllTraffic",
        clock=fake.clock(),
        log=lines.append,
    )
    assert out[0].cw_max is None
    assert out[0].cw_ratio is None
    assert MAX_LAG_S <= sum(fake.sleeps) <= MAX_LAG_S + 20
    assert any("no datapoints for rung(s) [3]" in line for line in lines)


def test_naive_and_zulu_times_are_utc() -> None:
    assert parse_time("2026-01-01T00:00:00Z") == datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_time("2026-01-01T00:00:00") == datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_time("2026-01-01T01:00:00+01:00") == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("age", "period"),
    [
        (timedelta(minutes=20), 10),
        (timedelta(hours=2, minutes=59), 10),
        (timedelta(hours=4), 60),
        (timedelta(days=14), 60),
        (timedelta(days=20), 300),
        (timedelta(days=90), 3600),
    ],
)
def test_period_follows_what_cloudwatch_still_holds(age: timedelta, period: int) -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    assert period_for(now - age, now) == period


def test_an_old_window_is_read_at_60_s_and_the_rung_says_so(clients: AwsClients) -> None:
    endpoint = unique()
    now = datetime.now(UTC)
    start = now.replace(second=0, microsecond=0) - timedelta(hours=4)
    end = start + timedelta(seconds=120)
    put_concurrency(endpoint, "AllTraffic", series(start, end, 6.0))
    asked: list[int] = []

    def record(params: dict[str, object], **kwargs: object) -> None:
        asked.append(int(params["Period"]))  # type: ignore[call-overload]

    clients.cloudwatch.meta.events.register(
        "provide-client-params.cloudwatch.GetMetricStatistics", record
    )
    lines: list[str] = []
    (out,) = annotate_rungs(
        clients.cloudwatch,
        [rung(6, 6.0, start, end)],
        endpoint=endpoint,
        variant="AllTraffic",
        clock=FakeClock(start=now).clock(),
        log=lines.append,
    )
    assert set(asked) == {60}
    assert out.cw_period_s == 60
    assert out.cw_max == pytest.approx(6.0)
    assert out.cw_ratio == pytest.approx(1.0)
    assert any("read at 60 s" in line for line in lines), lines
