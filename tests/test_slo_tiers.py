"""SLO tiers: several SLOs bracketed by one run's shared rungs; one SLO behaves as before."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration.cases import BY_NAME
from pytest_tts_scaling.calibration.truth import serial_qmax
from pytest_tts_scaling.core.stats import summarize
from pytest_tts_scaling.core.verdicts import at_slo
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.option_table import slo_ms
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.report.extras import rung_table_html
from pytest_tts_scaling.steps.qmax import run_ladder
from tests.factories import make_rung, qmax_inputs


def test_several_slos_parse_as_tiers_and_one_as_before() -> None:
    assert slo_ms("3000") == 3000.0
    assert slo_ms("3000,1000,2000") == (1000.0, 2000.0, 3000.0)
    for bad in ("1000,1000", "1000,-5", "1000,,2000", "fast"):
        with pytest.raises(argparse.ArgumentTypeError, match="distinct ones separated by commas"):
            slo_ms(bad)
    run = RunOptions.from_namespace({"tts_slo_ms": (1000.0, 3000.0)})
    assert (run.slo_ms, run.slo_tiers_ms) == (3000.0, (1000.0, 3000.0))
    assert run.for_kind().slo_tiers_ms == (1000.0, 3000.0)
    assert RunOptions.from_namespace({"tts_slo_ms": 2000.0}).for_kind().slo_tiers_ms == (2000.0,)


def test_a_rung_is_judged_again_at_each_tier() -> None:
    slow = make_rung(4, meets_slo=False, fail_reason="slo", goodput_ttfab_p95_ms=1500.0)
    broken = make_rung(5, meets_slo=False, fail_reason="errors", goodput_ttfab_p95_ms=100.0)
    at_2000 = at_slo([slow, broken], 2000)
    assert [(r.meets_slo, r.fail_reason) for r in at_2000] == [(True, None), (False, "errors")]
    assert not at_slo([slow], 1000)[0].meets_slo


def test_one_run_brackets_q_max_at_each_tier(tmp_path: Path) -> None:
    """A serial server (50 ms a request, first audio at 20 ms): Q_max 4 at 195 ms, 6 at 295 ms."""
    case = BY_NAME["serial-fast"]
    assert (serial_qmax(0.05, 0.02, 195), serial_qmax(0.05, 0.02, 295)) == (4, 6)
    lines: list[str] = []
    with case.server() as server:
        settings = qmax_inputs(
            endpoint_url=server.base_url,
            slo_ms=295.0,
            slo_tiers_ms=(195.0, 295.0),
            hold_s=2.0,
            measure_s=4 / 3,
            gap_s=0.0,
            artifacts_dir=tmp_path,
        )
        result = run_ladder(UrlEndpoint(server.base_url), settings, progress=lines.append)
    a = result.artifact
    assert [(t.slo_ms, t.q_max, t.q_max_bracketed) for t in a.slo_tiers] == [
        (195.0, 4, True),
        (295.0, 6, True),
    ], lines
    assert (a.slo_ms, a.q_max) == (295.0, 6)
    measured = sorted(r.concurrency for r in a.rungs)
    assert {4, 5, 6, 7} <= set(measured)
    assert len(measured) == len(set(measured))  # shared rungs: each measured once (or again)
    summary = result.summary_lines()
    assert "qmax: at p95 TTFAB <= 195 ms: Q_max 4 (bracketed)" in summary
    assert "SLO tier" in rung_table_html(a)


def test_an_artifact_of_one_slo_has_no_tiers() -> None:
    from tests.factories import make_qmax

    artifact = make_qmax([make_rung(1, ttfab_ms=summarize([1.0]))], q_max=1, q_max_bracketed=False)
    assert artifact.slo_tiers == []
    assert "SLO tier" not in rung_table_html(artifact)
