"""What makes a qmax answer less trustworthy than it looks is measured and said."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.core.schema import Host, Interval, Rung
from pytest_tts_scaling.core.verdicts import falls_in_p95
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.steps.qmax import run_ladder
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from pytest_tts_scaling.steps.qmax.rung import (
    MAX_SAMPLE_EXTENSIONS,
    MIN_COMPLETIONS,
    extension_rule,
)
from pytest_tts_scaling.steps.qmax.words import trust_lines
from tests.factories import make_record, make_rung, qmax_inputs


def ok(i: int, ttfab: float = 100.0) -> RequestRecord:
    return make_record(i, ttfab_ms=ttfab, latency_ms=ttfab)


def test_a_sparse_window_is_extended_a_bounded_number_of_times() -> None:
    rule = extension_rule(slo_ms=1000, measure_s=2.0)
    sparse = [ok(i) for i in range(3)]
    assert [rule(sparse, 2.0) for _ in range(MAX_SAMPLE_EXTENSIONS + 2)] == [2.0] * 4 + [0.0] * 2


def test_a_window_a_few_short_is_held_just_long_enough_to_reach_them() -> None:
    # 16 of 20 in a 2 s window: 4 more at 8 per second take 0.5 s; with a quarter more, 0.625 s.
    rule = extension_rule(slo_ms=1000, measure_s=2.0)
    assert rule([ok(i) for i in range(MIN_COMPLETIONS - 4)], 2.0) == pytest.approx(0.625)
    # One short: at least a quarter of a measure window.
    assert extension_rule(slo_ms=1000, measure_s=2.0)([ok(i) for i in range(19)], 2.0) == 0.5
    # None at all: a whole measure window.
    assert extension_rule(slo_ms=1000, measure_s=2.0)([], 2.0) == 2.0


def test_a_full_window_far_from_the_slo_is_not_extended() -> None:
    rule = extension_rule(slo_ms=1000, measure_s=2.0)
    assert rule([ok(i) for i in range(MIN_COMPLETIONS)], 2.0) == 0.0


def interval_rung(concurrency: int, low: float, high: float) -> Rung:
    rung = make_rung(concurrency)
    return rung.model_copy(update={"ttfab_p95_ci_ms": Interval(low=low, high=high)})


def test_a_p95_that_falls_beyond_both_intervals_is_flagged() -> None:
    rungs = [interval_rung(1, 90, 110), interval_rung(2, 400, 500), interval_rung(3, 150, 200)]
    assert falls_in_p95(rungs) == [3]


def test_overlapping_intervals_or_a_rise_are_not_a_fall() -> None:
    rungs = [interval_rung(1, 90, 110), interval_rung(2, 100, 300), interval_rung(3, 95, 120)]
    assert falls_in_p95(rungs) == []


def one_rung(
    server: SerialStreamServer,
    tmp_path: Path,
    *,
    hold_s: float,
    measure_s: float,
    slo_ms: float = 5000,
) -> QmaxInputs:
    """The ladder N=1 alone against `server`, by default far inside a 5 s SLO."""
    return qmax_inputs(
        endpoint_url=server.base_url,
        slo_ms=slo_ms,
        ladder=(1,),
        hold_s=hold_s,
        measure_s=measure_s,
        gap_s=0.0,
        artifacts_dir=tmp_path,
    )


def test_trust_lines_name_a_busy_host_thin_rungs_and_a_fall(tmp_path: Path) -> None:
    with SerialStreamServer(service_s=0.3, first_audio_s=0.05) as server:
        settings = one_rung(server, tmp_path, hold_s=1.5, measure_s=1.0)
        result = run_ladder(UrlEndpoint(server.base_url), settings, progress=lambda line: None)
    (rung,) = result.artifact.rungs
    # One window holds about 3 requests of 300 ms: it was held for more, then flagged.
    assert rung.extensions == MAX_SAMPLE_EXTENSIONS
    assert rung.few_samples
    assert rung.load_avg_1m is not None
    busy = result.artifact.model_copy(
        update={
            "host": Host(cpu_model="Test CPU", cpu_count=2, cores_shared=True),
            "rungs": [rung.model_copy(update={"load_avg_1m": 5.0})],
            "non_monotonic": [4],
        }
    )
    text = "\n".join(trust_lines(busy))
    assert "the host was busy: load average up to 5.0 on 2 cores (shared" in text
    assert f"N=1 judged on fewer than {MIN_COMPLETIONS} completed requests" in text
    assert "p95 TTFAB fell at N=4" in text


def test_a_second_run_keeps_the_first_runs_outputs(tmp_path: Path) -> None:
    lines: list[str] = []
    with SerialStreamServer(service_s=0.02, first_audio_s=0.01) as server:
        settings = one_rung(server, tmp_path, hold_s=1.0, measure_s=0.5)
        first = run_ladder(UrlEndpoint(server.base_url), settings, progress=lines.append)
        second = run_ladder(UrlEndpoint(server.base_url), settings, progress=lines.append)
    assert first.path == second.path
    kept = [line for line in lines if "kept the earlier" in line]
    assert len(kept) == 3  # the artifact, its records and its inputs
    assert len(list(tmp_path.glob("qmax-*.json"))) == 2


def test_a_slow_endpoint_is_not_called_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every request of the rung is cut at the 1 s stall bound, but the endpoint still answers
    # (after 1.5 s): the probe after the rung waits longer, so the run ends with a verdict.
    monkeypatch.setattr("pytest_tts_scaling.load.engine.STALL_FLOOR_S", 1.0)
    with SerialStreamServer(service_s=1.6, first_audio_s=1.5) as server:
        settings = one_rung(server, tmp_path, hold_s=2.0, measure_s=1.0, slo_ms=200)
        result = run_ladder(UrlEndpoint(server.base_url), settings, progress=lambda line: None)
    assert result.artifact.complete
    assert result.artifact.q_max is None
