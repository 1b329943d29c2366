"""A rung whose window already holds a clear failure ends there (the exact answer, fast).

The rule is the bracket's own criterion, stricter: a usable window whose p95 interval (at 99%)
lies above the SLO. A pass, a doubtful failure or an unsettled window is held to its end.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.calibration.disciplines import Slots
from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.core.verdicts import select_qmax
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.load.engine import run_rung
from pytest_tts_scaling.load.transports.http import HttpStreamTransport
from pytest_tts_scaling.load.workload import Workload
from pytest_tts_scaling.steps.qmax import run_ladder
from pytest_tts_scaling.steps.qmax.rung import MIN_COMPLETIONS, clear_failure_rule
from tests.factories import make_record, qmax_inputs

SLO_MS = 300.0
WINDOW_START = 1_000_000_000


def window(ttfabs: list[float | None], start_ns: int = WINDOW_START) -> list[RequestRecord]:
    """Requests 10 ms apart from `start_ns`; None is one cut waiting past the stall bound."""
    return [
        make_record(
            start_ns + i * 10_000_000,
            ttfab_ms=t,
            latency_ms=700.0,
            audio_s=1.0,
            **({} if t is not None else {"status": "timeout", "error_code": "waited_past_bound"}),
        )
        for i, t in enumerate(ttfabs)
    ]


def decides(records: list[RequestRecord]) -> bool:
    rule = clear_failure_rule(4, SLO_MS, records)
    return rule(WINDOW_START, WINDOW_START + 2_000_000_000)


def test_a_window_far_above_the_slo_is_a_clear_failure() -> None:
    assert decides(window([600.0 + (i % 3) for i in range(40)]))
    assert decides(window([None] * 40))  # every request waited past the bound


def test_a_pass_a_doubtful_failure_or_too_few_requests_are_held() -> None:
    assert not decides(window([100.0 + (i % 7) for i in range(200)]))  # well within the SLO
    # 8% above: the p95 is past the SLO, but its 99% interval reaches below it.
    assert not decides(window([400.0 if i % 12 == 0 else 100.0 for i in range(100)]))
    assert not decides(window([900.0] * (MIN_COMPLETIONS - 1)))


def test_a_window_still_climbing_is_not_a_verdict() -> None:
    # Far above the SLO but still growing: not settled, so not a verdict either way.
    assert not decides(window([400.0 + 20.0 * i for i in range(60)]))


def test_requests_that_started_before_the_window_do_not_count() -> None:
    warm_up = window([900.0] * 40, start_ns=0)
    assert not decides(warm_up)
    assert decides(warm_up + window([900.0] * 40))


def test_the_rule_is_asked_only_from_a_third_of_the_window_and_ends_it() -> None:
    workload = Workload()
    asked: list[float] = []
    with SerialStreamServer(service_s=0.02, first_audio_s=0.01) as server:

        def should_end(window_start_ns: int, now_ns: int) -> bool:
            asked.append((now_ns - window_start_ns) / 1e9)
            return len(asked) == 2

        async def go():  # type: ignore[no-untyped-def]
            async with HttpStreamTransport(server.base_url) as transport:
                return await run_rung(
                    transport,
                    lambda w, s: workload.request(1, w, s),
                    concurrency=1,
                    hold_s=1.5,
                    measure_s=1.2,
                    should_end=should_end,
                )

        result = asyncio.run(go())
    assert result.ended_early
    assert len(asked) == 2
    assert asked[0] >= 0.4 - 0.01  # a third of the 1.2 s window
    assert result.measure_s == asked[1] or abs(result.measure_s - asked[1]) < 0.05
    # The window ended where the rule said so (its second answer), not at the hold's end: the
    # rung's own reading of that moment, with no elapsed time a busy machine could stretch.


def test_a_clearly_failing_rung_ends_early_and_still_brackets(tmp_path: Path) -> None:
    # Serial server, 20 ms per request, first audio at 10 ms: Q_max 15 at 295 ms; N=40 has a p95
    # of about 790 ms. The ladder (1, 40) then bisects down to the pair 15/16.
    with SerialStreamServer(discipline=Slots(1, 0.02, 0.01)) as server:
        settings = qmax_inputs(
            endpoint_url=server.base_url,
            slo_ms=295.0,
            ladder=(1, 40),
            hold_s=3.0,
            measure_s=2.0,
            gap_s=0.0,
            artifacts_dir=tmp_path,
        )
        result = run_ladder(UrlEndpoint(server.base_url), settings, progress=print)
    rungs = {r.concurrency: r for r in result.artifact.rungs}
    assert not rungs[1].ended_early
    failing = rungs[40]
    assert (failing.ended_early, failing.usable, failing.fail_reason) == (True, True, "slo")
    assert failing.measure_s <= 2.0  # never longer than the window it was given
    assert select_qmax(result.artifact.rungs, 295.0) == (15, True)
    assert not rungs[15].ended_early
