"""A qmax answer whose p95 interval still holds the SLO after its extensions is shown as doubtful.

The issue's case: N=1 passed with a p95 interval of 2752-3909 ms around a 3000 ms SLO (the run
before had failed at N=1), and the report said "Q_max 1 bracketed". The verdict line, the
artifact, the report's first screen and the exit summary now say INCONCLUSIVE and what would
settle it; --fail-on-inconclusive makes it a failure for a CI gate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_tts_scaling.core.schema import Interval, QmaxArtifact, Rung
from pytest_tts_scaling.core.verdicts import doubt_line, inconclusive_rungs, verdict_words
from pytest_tts_scaling.report.extras import Shown
from pytest_tts_scaling.report.pages import view_for
from tests.factories import QMAX_EXAMPLE, make_qmax, make_rung


def rung(n: int, low: float, high: float, *, passed: bool, **fields: Any) -> Rung:
    ci = Interval(low=low, high=high)
    return make_rung(n, meets_slo=passed, ttfab_p95_ci_ms=ci, extensions=2, **fields)


def the_issues_run() -> QmaxArtifact:
    rungs = [
        rung(1, 2752, 3909, passed=True),
        rung(2, 5200, 6100, passed=False, fail_reason="slo", ttfab_p95_ms=5600),
    ]
    return make_qmax(
        rungs, q_max=1, inconclusive=inconclusive_rungs(rungs, 1, 3000), settings={"measure_s": 15}
    )


def test_the_rungs_the_verdict_rests_on_are_the_ones_judged() -> None:
    passing_doubtful = [rung(1, 2752, 3909, passed=True), rung(2, 5200, 6100, passed=False)]
    assert inconclusive_rungs(passing_doubtful, 1, 3000) == [1]
    failing_doubtful = [rung(1, 100, 200, passed=True), rung(2, 2900, 3300, passed=False)]
    assert inconclusive_rungs(failing_doubtful, 1, 3000) == [2]
    # A doubtful rung far below Q_max is not what the answer rests on.
    settled = [rung(1, 2990, 3010, passed=True), rung(4, 100, 2000, passed=True)]
    settled.append(rung(5, 3100, 3900, passed=False))
    assert inconclusive_rungs(settled, 4, 3000) == []
    # No Q_max: the failure at the bottom; errors are not a matter of more data.
    bottom = [rung(1, 2800, 3500, passed=False, fail_reason="slo")]
    assert inconclusive_rungs(bottom, None, 3000) == [1]
    errors = [rung(1, 2800, 3500, passed=False, fail_reason="errors")]
    assert inconclusive_rungs(errors, None, 3000) == []


def test_the_verdict_line_says_inconclusive_and_what_would_settle_it() -> None:
    artifact = the_issues_run()
    assert verdict_words(artifact).startswith("Q_max 1 (bracketed: N=2 failed")
    assert verdict_words(artifact).endswith(", INCONCLUSIVE")
    assert doubt_line(artifact) == (
        "qmax: INCONCLUSIVE: N=1's pass (p95 interval 2752-3909 ms, after 2 extension(s)) still "
        "holds the SLO 3000 ms: a longer --measure-s (this run: 15 s) or a quieter host would "
        "settle it"
    )
    settled = make_qmax([rung(1, 100, 200, passed=True)], q_max=1, q_max_bracketed=False)
    assert "INCONCLUSIVE" not in verdict_words(settled)
    assert doubt_line(settled) is None


def test_an_artifact_written_before_the_field_reads_as_conclusive() -> None:
    data = json.loads(QMAX_EXAMPLE.read_text())
    assert "inconclusive" not in data
    assert QmaxArtifact.model_validate(data).inconclusive == []


def test_the_reports_first_screen_marks_it(tmp_path: Path) -> None:
    view = view_for(Shown(the_issues_run(), tmp_path / "qmax.json"))
    assert view.qualifier == "bracketed, INCONCLUSIVE"
    assert view.state == "warn"
    assert view.trust[0].value == "no: INCONCLUSIVE"
    assert view.notes[0].startswith("INCONCLUSIVE: N=1's pass")


CONFTEST = """
import pytest
from pathlib import Path
from pytest_tts_scaling.core.schema import QmaxArtifact
from pytest_tts_scaling.steps.qmax import LadderResult

@pytest.fixture(scope="session")
def tts_ladder(tts_summary):
    path = Path("qmax.json")
    result = LadderResult(QmaxArtifact.model_validate_json(path.read_text()), path, Path("r.jsonl"))
    tts_summary.extend(result.summary_lines())
    return result
"""


@pytest.mark.parametrize("gate", [False, True])
def test_under_pytest_a_warning_or_with_the_gate_a_failure(
    pytester: pytest.Pytester, qmax_scenario: Path, gate: bool
) -> None:
    """The scenario with its measurement replaced by the issue's artifact (a conftest fixture)."""
    pytester.makeconftest(CONFTEST)
    (pytester.path / "qmax.json").write_text(the_issues_run().model_dump_json(by_alias=True))
    args = ["-p", "no:cacheprovider", "-m", "qmax", "--endpoint-url", "http://127.0.0.1:9"]
    result = pytester.runpytest_subprocess(*args, *(["--tts-fail-on-inconclusive"] if gate else []))
    result.stdout.fnmatch_lines(
        [
            "*tts-scaling*",
            "qmax: Q_max 1 (bracketed: N=2 failed, p95 TTFAB 5600 ms > *), INCONCLUSIVE for *",
        ]
    )
    if gate:
        result.assert_outcomes(failed=1, passed=1, skipped=2)
        result.stdout.fnmatch_lines(
            ["qmax: FAIL (--tts-fail-on-inconclusive): INCONCLUSIVE: N=1's*"]
        )
    else:
        result.assert_outcomes(passed=2, skipped=2)
        result.stdout.fnmatch_lines(["*InconclusiveWarning: qmax: INCONCLUSIVE: N=1's pass*"])


@pytest.mark.parametrize(("gate", "code"), [([], 0), (["--fail-on-inconclusive"], 1)])
def test_tts_bench_says_it_and_the_gate_exits_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    gate: list[str],
    code: int,
) -> None:
    from pytest_tts_scaling.cli import main
    from pytest_tts_scaling.steps.qmax import LadderResult

    result = LadderResult(the_issues_run(), tmp_path / "qmax.json", tmp_path / "r.jsonl")
    monkeypatch.setattr("pytest_tts_scaling.steps.qmax.run_ladder", lambda *a, **k: result)
    url = ["--endpoint-url", "http://127.0.0.1:9", "--artifacts-dir", str(tmp_path)]
    assert main(["qmax", *url, *gate]) == code
    out = capsys.readouterr().out
    assert (
        "qmax: Q_max 1 (bracketed: N=2 failed, p95 TTFAB 5600 ms > SLO 3000 ms), INCONCLUSIVE"
        in out
    )
    assert "qmax: INCONCLUSIVE: N=1's pass" in out
    assert ("qmax: FAIL: the answer is inconclusive (--fail-on-inconclusive)" in out) == bool(gate)
