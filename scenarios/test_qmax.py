"""`pytest -m qmax`: measure Q_max and gate on it.

The ladder is measured once per session (the `tts_ladder` fixture); each test asserts one
property of the result, so the report names what failed.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.ladder import LadderResult
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.report import ReportExtras, ladder_png, rung_table_html

pytestmark = pytest.mark.qmax


def test_qmax_found(tts_ladder: LadderResult, tts_report: ReportExtras) -> None:
    artifact = tts_ladder.artifact
    tts_report.png(ladder_png(artifact), name="ladder: p95 TTFAB and throughput per rung")
    tts_report.html(rung_table_html(artifact), name="rungs")
    assert artifact.q_max is not None, (
        f"no rung met p95 TTFAB <= {artifact.slo_ms:g} ms; lowest rung: "
        f"{artifact.rungs[0].ttfab_ms.p95 if artifact.rungs else 'none measured'} ms "
        "(lower --ladder or raise --slo-ms)"
    )


def test_qmax_bracketed(tts_ladder: LadderResult) -> None:
    artifact = tts_ladder.artifact
    assert artifact.q_max_bracketed, (
        f"Q_max {artifact.q_max} is only a lower bound: no rung above it failed; "
        f"extend --ladder beyond {max(r.concurrency for r in artifact.rungs)}"
    )


def test_qmax_at_least_minimum(tts_ladder: LadderResult, tts_options: RunOptions) -> None:
    if tts_options.min_qmax is None:
        pytest.skip("no --min-qmax gate given")
    q_max = tts_ladder.artifact.q_max or 0
    assert q_max >= tts_options.min_qmax, (
        f"Q_max {q_max} is below --min-qmax {tts_options.min_qmax}"
    )
