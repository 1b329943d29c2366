"""A qmax run is never silent for longer than one progress interval: extensions, re-tests, drains
and gaps each say so, with the reason and a revised ETA."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.core.search import Step
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.load.engine import WindowClock, run_rung
from pytest_tts_scaling.steps.inputs import WorkloadInputs
from pytest_tts_scaling.steps.qmax import run_ladder, wait_gap
from pytest_tts_scaling.steps.qmax import rung as qmax_rung
from pytest_tts_scaling.steps.qmax.rung import MIN_COMPLETIONS, drain_line, extension_rule
from pytest_tts_scaling.steps.qmax.words import again_line
from tests.factories import make_record, make_rung, qmax_inputs


def test_each_extension_is_told_with_its_reason() -> None:
    heard: list[tuple[str, float]] = []
    rule = extension_rule(1000, 10.0, lambda reason, more_s: heard.append((reason, more_s)))
    sparse = [make_record(i, ttfab_ms=100, latency_ms=100) for i in range(5)]
    assert rule(sparse, 10.0) > 0
    assert heard[-1][0] == f"5 completed, a p95 needs {MIN_COMPLETIONS}"
    # TTFAB spread over 200..1050 ms: p95 about 1000 ms, and its interval holds the SLO.
    spread = [make_record(i, ttfab_ms=200 + 850 * i / 59, latency_ms=1500) for i in range(60)]
    assert rule(spread, 10.0) == 10.0
    reason, more_s = heard[-1]
    assert re.fullmatch(r"p95 interval \d+-\d+ ms holds the SLO 1000 ms", reason)
    assert more_s == 10.0


def test_a_sparse_rung_reports_through_its_extensions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """About 3 requests of 300 ms a window: extended four times; the live line goes on past the
    hold and each extension is a line with its reason and the run's ETA."""
    monkeypatch.setattr(qmax_rung, "PROGRESS_EVERY_S", 0.5)
    lines: list[str] = []
    with SerialStreamServer(service_s=0.3, first_audio_s=0.05) as server:
        settings = qmax_inputs(
            endpoint_url=server.base_url,
            slo_ms=5000,
            ladder=(1,),
            hold_s=1.5,
            measure_s=1.0,
            gap_s=0.0,
            artifacts_dir=tmp_path,
        )
        run_ladder(UrlEndpoint(server.base_url), settings, progress=lines.append)
    extended = [line for line in lines if "window extended by" in line]
    assert len(extended) == 4
    assert all("completed, a p95 needs 20); run ETA " in line for line in extended)
    assert any("(extended), p95 TTFAB so far" in line for line in lines)
    assert lines[0].startswith("qmax: asking ")


def test_the_engine_keeps_the_clock_current() -> None:
    clock = WindowClock()
    workload = WorkloadInputs(model="kokoro-82m").workload("url")
    extended = False

    def once(window: object, window_s: float) -> float:
        nonlocal extended
        if extended:
            return 0.0
        extended = True
        return 0.2

    async def run() -> int:
        with SerialStreamServer(service_s=0.02, first_audio_s=0.01) as server:
            endpoint = UrlEndpoint(server.base_url)
            async with endpoint.transport("response-stream", concurrency=1) as transport:
                result = await run_rung(
                    transport,
                    lambda worker, seq: workload.request(1, worker, seq),
                    concurrency=1,
                    hold_s=0.3,
                    measure_s=0.2,
                    should_extend=once,
                    max_extensions=2,
                    clock=clock,
                )
        return result.window_end_ns

    window_end = asyncio.run(run())
    assert clock.end_ns == window_end
    assert clock.draining
    assert clock.drain_s > 0


def test_drain_gap_and_again_lines() -> None:
    step = Step(5, "retest")
    assert drain_line(step, 3, 30, 75) == (
        "qmax N=5 retest: window closed, waiting up to 30 s for 3 request(s) in flight to "
        "finish; run ETA 1m15s"
    )
    failed = make_rung(5, meets_slo=False, fail_reason="slo")
    assert again_line(step, [failed], 75) == (
        "qmax N=5 retest: its failure (slo) was doubtful, so it is re-tested before it caps "
        "Q_max; run ETA 1m15s"
    )
    unusable = make_rung(5, usable=False, unusable_reason="not_settled", meets_slo=False)
    assert "it was unusable (not_settled), so it is measured again" in (
        again_line(Step(5, "remeasure"), [unusable], 10) or ""
    )
    assert again_line(Step(6, "search"), [failed], 10) is None


def test_a_gap_longer_than_the_interval_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pytest_tts_scaling.steps.qmax.PROGRESS_EVERY_S", 0.2)
    lines: list[str] = []
    wait_gap(0.5, Step(10, "search"), lines.append, lambda rest_s: 90.0 + rest_s)
    assert len(lines) >= 2
    assert all(
        re.fullmatch(r"qmax: gap, \d+ s before N=10 search; run ETA 1m\d\ds", x) for x in lines
    )
