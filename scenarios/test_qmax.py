"""`pytest -m qmax`: measure Q_max and gate on it.

The ladder is measured once per session (the `tts_ladder` fixture); each test asserts one
property of the result, so the report names what failed.
"""

from __future__ import annotations

import warnings

import pytest

from pytest_tts_scaling.core.next_step import next_step_line
from pytest_tts_scaling.core.schema import QmaxArtifact
from pytest_tts_scaling.core.verdicts import doubt_line
from pytest_tts_scaling.failures import InconclusiveWarning, fail, one_line
from pytest_tts_scaling.report.extras import ReportExtras, render, rung_table_html
from pytest_tts_scaling.report.plots import ladder_svg
from pytest_tts_scaling.steps.qmax import LadderResult
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from pytest_tts_scaling.steps.qmax.words import no_qmax_message

pytestmark = pytest.mark.qmax


def test_qmax_found(
    tts_ladder: LadderResult,
    tts_qmax_inputs: QmaxInputs,
    tts_report: ReportExtras,
    tts_summary: list[str],
) -> None:
    artifact = tts_ladder.artifact
    tts_report.artifact(artifact, tts_ladder.path)
    tts_report.html(rung_table_html(artifact), name="rungs")
    if artifact.q_max is None:
        step = next_step_line(artifact, "pytest")
        fail("qmax", f"FAIL: {no_qmax_message(artifact)}{f'; {step}' if step else ''}", tts_summary)
    if (doubt := doubt_line(artifact)) is not None:
        if tts_qmax_inputs.gates.fail_on_inconclusive:
            fail(
                "qmax",
                f"FAIL (--tts-fail-on-inconclusive): {doubt.removeprefix('qmax: ')}",
                tts_summary,
            )
        warnings.warn(doubt, InconclusiveWarning, stacklevel=1)


def test_qmax_bracketed(
    tts_ladder: LadderResult, tts_qmax_inputs: QmaxInputs, tts_summary: list[str]
) -> None:
    """The search must find the ceiling; a ladder the user chose may stop below it."""
    artifact = tts_ladder.artifact
    top = max(r.concurrency for r in artifact.rungs)
    if artifact.q_max is None:
        pytest.skip("no Q_max to bracket (see test_qmax_found)")
    if not artifact.q_max_bracketed and tts_qmax_inputs.ladder.concurrencies is not None:
        pytest.skip(
            f"Q_max {artifact.q_max} is a lower bound of the given ladder: every rung up to {top} "
            "met the SLO; extend --tts-ladder to bracket it"
        )
    if not artifact.q_max_bracketed:
        fail(
            "qmax",
            f"FAIL: Q_max {artifact.q_max} is only a lower bound: no rung above it failed clearly "
            f"(the search went up to N={top}); raise --tts-max-concurrency beyond {top}",
            tts_summary,
        )


def test_qmax_at_least_minimum(
    tts_ladder: LadderResult, tts_qmax_inputs: QmaxInputs, tts_summary: list[str]
) -> None:
    from pytest_tts_scaling.steps.baseline import below_minimum

    if tts_qmax_inputs.gates.min_qmax is None:
        pytest.skip("no --tts-min-qmax gate given")
    if (floor := below_minimum(tts_ladder.artifact, tts_qmax_inputs.gates)) is not None:
        fail("qmax", f"FAIL: {floor}", tts_summary)


@pytest.fixture(scope="session", autouse=True)
def qmax_baseline(
    request: pytest.FixtureRequest, tts_qmax_inputs: QmaxInputs, tts_summary: list[str]
) -> QmaxArtifact | None:
    """The --tts-baseline artifact, read before the ladder runs (its file may be written over).

    Autouse, so it is set up ahead of `tts_ladder`: a baseline that cannot be read, or one of
    another model, transport, SLO or fingerprint, fails the qmax tests before anything is
    measured.
    """
    from pytest_tts_scaling.steps.baseline import check_endpoint, load_baseline

    with one_line("qmax", tts_summary, "--tts-baseline refused"):
        baseline = load_baseline(tts_qmax_inputs)
    if baseline is not None and not tts_qmax_inputs.outputs.dry_run:
        endpoint = request.getfixturevalue("tts_endpoint")
        with one_line("qmax", tts_summary, "--tts-baseline refused"):
            check_endpoint(baseline, tts_qmax_inputs.gates, endpoint)
    return baseline


def test_qmax_no_regression_against_baseline(
    tts_ladder: LadderResult,
    qmax_baseline: QmaxArtifact | None,
    tts_qmax_inputs: QmaxInputs,
    tts_report: ReportExtras,
    tts_summary: list[str],
    pytestconfig: pytest.Config,
) -> None:
    from pytest_tts_scaling.stash import COMPARISON_KEY
    from pytest_tts_scaling.steps.baseline import compare_with_baseline

    if qmax_baseline is None:
        pytest.skip("no --tts-baseline given")
    artifact = tts_ladder.artifact
    with one_line("qmax", tts_summary, "--tts-baseline refused"):
        comparison = compare_with_baseline(qmax_baseline, tts_ladder, tts_qmax_inputs.gates)
    pytestconfig.stash[COMPARISON_KEY] = comparison  # the MLflow run's verdict counts it
    tts_report.svg(ladder_svg(artifact, baseline=qmax_baseline), name="ladder against the baseline")
    tts_report.html(render("compare.html.j2", comparison=comparison), name="regression checks")
    tts_summary.extend(f"qmax baseline: warning: {w}" for w in comparison.warnings)
    tts_summary.extend(f"qmax baseline: {c.line()}" for c in comparison.regressions)
    tts_summary.append(f"qmax baseline: {comparison.verdict_line()}")
    if not comparison.ok:
        pytest.fail(
            "\n".join([*(c.line() for c in comparison.regressions), comparison.verdict_line()]),
            pytrace=False,
        )
