from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.core.schema import QmaxArtifact
from pytest_tts_scaling.core.timeline import (
    Event,
    assemble,
    iso,
    parse_iso,
    probe_rung,
    recovered_at_ns,
    recovery_threshold_ms,
)
from pytest_tts_scaling.errors import InputError
from tests.factories import make_qmax, make_record, make_rung

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_source_timeline_sums_and_names_the_dominant_stage() -> None:
    events = [
        Event("load_applied", at(-30), "probe"),
        Event("desired_set", at(0), "UpdateEndpointWeightsAndCapacities"),
        Event("instance_logging", at(181), "log stream firstEventTimestamp", bounded=True),
        Event("framework_init", at(200), "marker"),
        Event("weights_ready", at(215), "marker"),
        Event("ready", at(230), "marker"),
        Event("in_service", at(245), "DescribeEndpoint", bounded=True),
        Event("traffic_recovered", at(260.2), "probe p95"),
    ]
    timeline = assemble(events)
    assert timeline.t_measured_s == pytest.approx(260.2)
    assert timeline.dominant_stage == "instance_logging"
    by_stage = {s.stage: s for s in timeline.stages}
    assert by_stage["instance_logging"].share == pytest.approx(181 / 260.2, abs=1e-4)
    assert by_stage["instance_logging"].bounded
    assert by_stage["load_applied"].elapsed_s == -30
    assert by_stage["load_applied"].share is None
    assert by_stage["traffic_recovered"].at == "2026-01-01T00:04:20.200000Z"
    assert "container_started" in timeline.missing
    assert timeline.out_of_order == []


def test_out_of_order_events_are_clamped_and_reported() -> None:
    events = [
        Event("desired_set", at(0), "api"),
        Event("ready", at(50), "marker"),
        Event("weights_ready", at(60), "marker"),  # skewed clock: after ready
        Event("in_service", at(70), "api"),
    ]
    timeline = assemble(events)
    assert timeline.out_of_order == ["ready"]
    assert [s.stage for s in timeline.stages] == [
        "desired_set",
        "weights_ready",
        "ready",
        "in_service",
    ]
    shares = [s.share for s in timeline.stages if s.share is not None]
    assert all(share >= 0 for share in shares)
    assert sum(shares) == pytest.approx(1.0)


def test_duplicates_keep_the_earliest_and_bad_input_is_refused() -> None:
    timeline = assemble(
        [Event("desired_set", at(0), "a"), Event("ready", at(9), "x"), Event("ready", at(5), "y")]
    )
    assert timeline.stages[-1].source == "y"
    with pytest.raises(ValueError, match="no desired_set"):
        assemble([Event("ready", at(1), "x")])
    with pytest.raises(ValueError, match="unknown stage"):
        assemble([Event("desired_set", at(0), "a"), Event("teleported", at(1), "x")])


def qmax(rungs: dict[int, float], q_max: int | None) -> QmaxArtifact:
    return make_qmax([make_rung(c, ttfab_p95_ms=p) for c, p in rungs.items()], q_max)


def test_probe_rung_choice() -> None:
    source = qmax({1: 65, 5: 100, 10: 200, 20: 400, 50: 2900, 60: 3500}, 50)
    assert probe_rung(source) == (10, 5)
    assert recovery_threshold_ms(source, 5) == pytest.approx(125)
    assert probe_rung(qmax({1: 500, 2: 900, 4: 2000, 8: 5000}, 4)) == (4, 2)
    assert probe_rung(qmax({1: 500, 2: 900}, None)) == (2, 1)
    with pytest.raises(InputError, match="half is also usable"):
        probe_rung(qmax({1: 500, 3: 900}, 3))


def probe_record(start_s: float, ttfab_ms: float) -> RequestRecord:
    return make_record(
        int(start_s * 1e9), ttfab_ms=ttfab_ms, request_id="r", rung=2, underrun_ms=0.0
    )


def test_recovery_is_the_first_full_window_under_the_threshold() -> None:
    # Slow until t=20 s, fast afterwards; 10 s windows.
    records = [probe_record(t, 900.0 if t < 20 else 300.0) for t in range(0, 45)]
    found = recovered_at_ns(records, after_ns=0, window_s=10, threshold_ms=400)
    assert found == int(20e9)
    assert recovered_at_ns(records, after_ns=0, window_s=60, threshold_ms=400) is None
    assert recovered_at_ns(records, after_ns=0, window_s=10, threshold_ms=100) is None


def test_one_time_format_on_disk_read_back_leniently() -> None:
    at = datetime(2026, 12, 1, 10, 0, 0, 250000, tzinfo=UTC)
    assert iso(at) == "2026-12-01T10:00:00.250000Z"
    assert iso(at.astimezone(timezone(timedelta(hours=2)))) == "2026-12-01T10:00:00.250000Z"
    assert iso(at.replace(tzinfo=None)) == "2026-12-01T10:00:00.250000Z"
    for written in ("2026-12-01T10:00:00.25Z", "2026-12-01T10:00:00.25+00:00",
                    "2026-12-01T12:00:00.25+02:00", "2026-12-01T10:00:00.25"):  # fmt: skip
        assert parse_iso(written) == at
        assert parse_iso(written).tzinfo is UTC
    with pytest.raises(ValueError, match="Invalid isoformat"):
        parse_iso("1 Dec 2026")
