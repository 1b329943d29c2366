"""Honest when things change: the answer confirmed before it is reported, a slow first answer
read as a cold start, the next step when N=1 alone misses the SLO, nothing green that the run
doubts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_tts_scaling.artifacts import load
from pytest_tts_scaling.calibration.cases import BY_NAME, Outcome
from pytest_tts_scaling.calibration.disciplines import Faults
from pytest_tts_scaling.core.confirm import confirmation_concurrency, judge_confirmation
from pytest_tts_scaling.core.next_step import next_step_line, suggested_slo_ms
from pytest_tts_scaling.core.schema import ClientTiming, Host, Interval, QmaxArtifact
from pytest_tts_scaling.core.verdicts import doubt_line, verdict_words
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.errors import EndpointUnavailable
from pytest_tts_scaling.report.pages import qmax_view
from pytest_tts_scaling.report.plots import throughput_svg
from pytest_tts_scaling.steps.qmax import run_ladder
from pytest_tts_scaling.steps.qmax.calibration import measure
from pytest_tts_scaling.steps.qmax.health import cold_start_line
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from pytest_tts_scaling.steps.qmax.words import no_qmax_message, trust_lines
from tests.factories import make_qmax, make_rung, qmax_inputs

SLO = 295.0


def url_settings(url: str, tmp_path: Path, **options: Any) -> QmaxInputs:
    """Rungs of 2 s (the last 4/3 measured) against `url` at the fast cases' SLO."""
    values: dict[str, Any] = {"slo_ms": SLO, "hold_s": 2.0, "measure_s": 4 / 3, "gap_s": 0}
    return qmax_inputs(endpoint_url=url, artifacts_dir=tmp_path, **{**values, **options})


def rung(n: int, p95: float, low: float, high: float, **fields: object):  # type: ignore[no-untyped-def]
    return make_rung(
        n,
        meets_slo=p95 <= SLO,
        ttfab_p95_ms=p95,
        goodput_ttfab_p95_ms=p95,
        ttfab_p95_ci_ms=Interval(low=low, high=high),
        **fields,
    )


def test_the_passing_rung_is_confirmed_unless_its_pass_came_last() -> None:
    one, six, seven = rung(1, 20, 19, 21), rung(6, 270, 268, 272), rung(7, 320, 318, 322)
    assert confirmation_concurrency([one, six, seven], 6, True) == 6
    assert confirmation_concurrency([one, seven, six], 6, True) is None  # already measured last
    assert confirmation_concurrency([one, six], 6, False) is None  # no pair: a lower bound
    assert confirmation_concurrency([one], None, False) is None


@pytest.mark.parametrize(
    ("again", "outcome"),
    [
        ((271, 269, 274), "held"),  # the same server
        ((280, 278, 283), "held"),  # a move within the noise floor (10% of the SLO)
        ((520, 515, 525), "changed"),  # it fails now: the pair came from two servers
        ((150, 148, 152), "changed"),  # faster now: N+1 might pass
        ((305, 240, 330), "not_repeated"),  # fails without a move beyond the intervals
    ],
)
def test_the_second_measurement_judges_the_server(
    again: tuple[float, float, float], outcome: str
) -> None:
    before = rung(6, 270, 262, 272)
    after = rung(6, *again)
    assert judge_confirmation(before, after, SLO).outcome == outcome


@pytest.mark.parametrize(("lag_max_ms", "outcome"), [(40.0, "changed"), (300.0, "not_repeated")])
def test_a_busy_client_still_shows_a_change_beyond_its_lateness(
    lag_max_ms: float, outcome: str
) -> None:
    """The client could not keep time in the second measurement: a move of p95 larger than
    its worst lateness (and the noise floor) is still the server's."""
    late = ClientTiming(ticks=100, lag_max_ms=lag_max_ms)
    after = rung(6, 524, 515, 530, usable=False, unusable_reason="client_saturated", client=late)
    confirmed = judge_confirmation(rung(6, 277, 270, 280), after, SLO)
    assert confirmed.outcome == outcome


def test_a_server_that_slowed_but_still_passes_holds_the_answer() -> None:
    before = rung(6, 200, 198, 202)
    confirmed = judge_confirmation(before, rung(6, 260, 255, 265), SLO)
    assert confirmed.outcome == "slowed"
    pair = [rung(1, 20, 19, 21), before, rung(7, 320, 315, 325)]
    artifact = make_qmax(pair, q_max=6, confirmation=confirmed)
    assert verdict_words(artifact).startswith("Q_max 6 (bracketed")
    assert "INCONCLUSIVE" not in verdict_words(artifact)
    assert any(
        line.startswith("qmax: the server slowed during the run") for line in trust_lines(artifact)
    )


def test_a_changed_server_voids_the_pair_and_names_the_change() -> None:
    before = rung(6, 270, 268, 272)
    confirmed = judge_confirmation(before, rung(6, 520, 515, 525), SLO)
    artifact = make_qmax([before], q_max=None, confirmation=confirmed)
    assert verdict_words(artifact) == (
        "no Q_max: the server changed speed during the run (N=6 p95 270 → 520 ms), INCONCLUSIVE"
    )
    view = qmax_view(artifact, Path("qmax.json"))
    assert view.qualifier == "the server changed speed during the run, INCONCLUSIVE"
    assert ("answer confirmed", "changed: N=6 p95 270 → 520 ms", "bad") in [
        (f.label, f.value, f.state) for f in view.trust
    ]
    assert no_qmax_message(artifact).startswith("INCONCLUSIVE: the server changed speed during")
    doubt = doubt_line(artifact)
    assert doubt is not None
    assert doubt.startswith("qmax: INCONCLUSIVE: the server changed speed")


@pytest.mark.timeout(300)
def test_the_slowing_server_is_caught_by_the_confirmation(tmp_path: Path) -> None:
    """Twice as slow once it first holds 7: measured 1, 6 (pass), 7 (fail), then 6 again."""
    case = BY_NAME["slowing"]
    lines: list[str] = []
    run = measure(case, ladder=None, hold_s=2.0, artifacts_dir=tmp_path, progress=lines.append)
    assert run.outcome.matches(case.truth()), (run.outcome, lines)
    assert run.outcome.change is not None
    assert run.outcome.change.startswith("N=6 p95 ")
    assert any(line.startswith("qmax N=6 confirm: the answer's passing rung") for line in lines)


@pytest.mark.timeout(300)
def test_without_confirmation_the_slowing_server_reads_as_the_fast_one(tmp_path: Path) -> None:
    """--no-confirm saves the rung and reports the pair as it was measured: a plain bracketed
    Q_max (the fast server's 6 where the client keeps time)."""
    case = BY_NAME["slowing"]
    with case.server() as server:
        settings = url_settings(server.base_url, tmp_path, slo_ms=case.slo_ms, no_confirm=True)
        result = run_ladder(UrlEndpoint(server.base_url), settings, progress=lambda _: None)
    assert result.artifact.q_max_bracketed
    assert result.artifact.confirmation is None
    assert "INCONCLUSIVE" not in verdict_words(result.artifact)
    assert not Outcome.of(result.artifact).matches(case.truth())


@pytest.mark.timeout(120)
def test_a_cold_first_answer_is_slow_not_absent(tmp_path: Path) -> None:
    """The first answer waits 3 s (the truth case waits 25 s): measured past, and named."""
    case = replace(BY_NAME["cold-start"], faults=Faults(cold_first_s=3.0))
    lines: list[str] = []
    run = measure(case, ladder=(1,), hold_s=1.5, artifacts_dir=tmp_path, progress=lines.append)
    assert run.outcome.error is None, run.outcome
    assert run.outcome.q_max == 1
    assert run.outcome.cold_first_ms is not None
    assert run.outcome.cold_first_ms >= 3000
    [said] = [line for line in lines if "cold start" in line]
    [artifact] = tmp_path.glob("qmax-*.json")
    kept = load(artifact, QmaxArtifact)
    assert cold_start_line(kept.probe.get("cold_ttfab_ms"), kept.probe.get("ttfab_ms")) == said
    assert said.startswith("qmax: the first answer took ")
    assert "it looks like a cold start" in said


@pytest.mark.timeout(120)
def test_silence_past_the_invocation_limit_does_not_answer_and_names_ping(tmp_path: Path) -> None:
    case = replace(BY_NAME["cold-start"], faults=Faults(cold_first_s=30.0))
    with case.server() as server:
        settings = url_settings(server.base_url, tmp_path, ladder=(1,), invocation_limit_s=1.0)
        endpoint = UrlEndpoint(server.base_url, invocation_limit_s=1.0)
        with pytest.raises(EndpointUnavailable) as caught:
            run_ladder(endpoint, settings, progress=lambda _: None)
    assert str(caught.value) == (
        f"endpoint {server.base_url} does not answer: no answer within the invocation limit "
        "(1 of 1 requests); /ping answered HTTP 200 at once; nothing was measured"
    )


def busy_local(p95: float = 3663.0, fail_reason: str = "slo"):  # type: ignore[no-untyped-def]
    one = make_rung(
        1,
        meets_slo=False,
        fail_reason=fail_reason,
        ttfab_p95_ms=p95,
        goodput_ttfab_p95_ms=p95,
        load_avg_1m=6.2,
    )
    return make_qmax(
        [one],
        q_max=None,
        provenance={
            "origin": "local:local",
            "run_id": "r",
            "measured_at": "2026-01-01T00:00:00Z",
            "tool_version": "0",
        },
        deployed_config={
            "instance_type": "local",
            "image_digest": "sha256:1234",
            "weights": "trained (int8-derived v1.0)",
        },
        host=Host(cpu_model="x", cpu_count=2, cores_shared=True),
    )


def test_n1_missing_the_slo_on_a_busy_host_gives_commands() -> None:
    assert suggested_slo_ms(3663) == 5500
    step = next_step_line(busy_local(), "pytest")
    assert step == (
        'next: make qmax ARGS="--tts-slo-ms 5500" (N=1 alone took p95 3663 ms against the SLO '
        "3000 ms); or stop other work or run on a quieter or larger machine (load average 6.2 on "
        "2 cores); or WEIGHTS=untrained make qmax checks the setup on the untrained development "
        "model (the same network, so about the same cost per request)"
    )
    bench = next_step_line(busy_local(), "tts-bench")
    assert bench is not None
    assert bench.startswith("next: tts-bench qmax --slo-ms 5500 ")
    view = qmax_view(busy_local(), Path("qmax.json"))
    assert step.removeprefix("qmax: ") in view.notes


def test_no_next_step_where_n1_failed_for_errors_or_a_qmax_was_found() -> None:
    assert next_step_line(busy_local(fail_reason="errors"), "pytest") is None
    found = make_qmax([make_rung(1)], q_max=1)
    assert next_step_line(found, "pytest") is None


def test_a_rung_judged_on_too_few_answers_is_amber_with_its_count() -> None:
    thin = make_rung(1, few_samples=True, completed=1)
    view = qmax_view(make_qmax([thin], q_max=1, q_max_bracketed=False), Path("qmax.json"))
    [usable] = [fact for fact in view.trust if fact.label == "usable rungs"]
    assert usable.value == "1 of 1; N=1 judged on 1 answer (too few for a p95)"
    assert usable.state == "warn"


def test_no_knee_where_no_rung_passed() -> None:
    failed = busy_local()
    assert "knee at" not in throughput_svg(failed)
    curve = make_qmax(
        [make_rung(1, throughput_rps=1.0), make_rung(2, throughput_rps=2.0)],
        q_max=2,
        q_max_bracketed=False,
    )
    assert "knee at N=2" in throughput_svg(curve)


def test_a_misspelled_plugin_option_names_the_closest_under_pytest(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tts-ladr", "1,2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: unrecognized arguments: --tts-ladr; did you mean --tts-ladder?"]
    )
    spelled = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tts-hold=3")
    spelled.stderr.fnmatch_lines(
        ["*unrecognized arguments: --tts-hold=3; did you mean --tts-hold-s?"]
    )
    # Someone else's unknown option is left to pytest's own words.
    other = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--frobnicate")
    other.stderr.fnmatch_lines(["*unrecognized arguments: --frobnicate"])
    assert "did you mean" not in other.stderr.str()
