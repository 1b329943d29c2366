"""Session fixtures: options, the endpoint, the frozen endpoint and the ladder result.

Measurement is expensive, so everything that measures is session-scoped and computed once, no
matter how many scenario tests assert on it. The plugin registers this module on every pytest
run, so what measures (numpy, pydantic, jinja2 ...) is imported inside the fixtures that use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_tts_scaling.failures import one_line
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.stash import COMPARISON_KEY, EXTRAS_KEY, OPTIONS_KEY, SUMMARY_KEY

if TYPE_CHECKING:
    from pytest_tts_scaling.core.schema import PlanArtifact, QmaxArtifact, TtotalArtifact
    from pytest_tts_scaling.endpoints.base import Endpoint
    from pytest_tts_scaling.report.extras import ReportExtras
    from pytest_tts_scaling.steps.qmax import LadderResult
    from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
    from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs


@pytest.fixture(scope="session")
def tts_options(pytestconfig: pytest.Config) -> RunOptions:
    """The parsed command-line options of this run."""

    return pytestconfig.stash[OPTIONS_KEY]


@pytest.fixture(scope="session")
def tts_qmax_inputs(tts_options: RunOptions) -> QmaxInputs:
    """What the qmax step takes, built from this run's options."""
    from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs

    return QmaxInputs.from_options(tts_options)


@pytest.fixture(scope="session")
def tts_ttotal_inputs(tts_options: RunOptions) -> TtotalInputs:
    """What the ttotal step takes, built from this run's options."""
    from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs

    return TtotalInputs.from_options(tts_options)


@pytest.fixture(scope="session")
def tts_summary(pytestconfig: pytest.Config) -> list[str]:
    """Lines printed in the `tts-scaling` section at the end of the run."""

    return pytestconfig.stash[SUMMARY_KEY]


@pytest.fixture(scope="session")
def tts_progress(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """Write one line to the terminal now, whatever capturing is active.

    Measurement runs inside fixture setup, where pytest captures the process's stdout at the
    file-descriptor level; capture is suspended for the line (as `capsys.disabled()` does), so
    per-rung progress of a long run reaches the terminal as it happens.
    """
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")

    def write(line: str) -> None:
        if reporter is None:
            return
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.ensure_newline()
            reporter.write_line(line)
            reporter.flush()

    return write


@pytest.fixture(scope="session")
def tts_endpoint(
    tts_options: RunOptions, tts_progress: Callable[[str], None], tts_summary: list[str]
) -> Iterator[Endpoint]:
    """The endpoint under measurement; for the local default, a server started for the session."""
    from pytest_tts_scaling.endpoints.factory import open_endpoint
    from pytest_tts_scaling.steps.inputs import target_from_options

    with (
        one_line("endpoint", tts_summary),
        open_endpoint(target_from_options(tts_options), log=tts_progress) as endpoint,
    ):
        yield endpoint


@pytest.fixture(scope="session")
def tts_frozen_endpoint(tts_endpoint: Endpoint, tts_summary: list[str]) -> Iterator[Endpoint]:
    """The endpoint with autoscaling suspended and capacity pinned to one instance."""
    with one_line("freeze", tts_summary), tts_endpoint.frozen() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def tts_ladder(
    request: pytest.FixtureRequest,
    tts_qmax_inputs: QmaxInputs,
    tts_progress: Callable[[str], None],
    tts_summary: list[str],
) -> Iterator[LadderResult]:
    """The measured ladder: the qmax artifact and where it and its records were written.

    With --dry-run it prints the schedule and skips without starting or calling anything. With
    --mlflow the run is recorded at the session's end, once the gates (the baseline's among
    them) have been decided.
    """
    from pytest_tts_scaling.steps.qmax import run_ladder
    from pytest_tts_scaling.steps.qmax.words import describe_schedule
    from pytest_tts_scaling.steps.tracking import record_qmax

    if tts_qmax_inputs.outputs.dry_run:
        for line in describe_schedule(tts_qmax_inputs):
            tts_progress(line)
        pytest.skip("dry run: schedule printed, nothing sent")
    endpoint: Endpoint = request.getfixturevalue("tts_frozen_endpoint")
    with one_line("qmax", tts_summary):
        result = run_ladder(endpoint, tts_qmax_inputs, progress=tts_progress)
    tts_summary.extend(result.summary_lines())
    yield result
    comparison = request.config.stash.get(COMPARISON_KEY, None)
    tts_summary.extend(record_qmax(result, tts_qmax_inputs, comparison))


@pytest.fixture(scope="session")
def tts_qmax(tts_ladder: LadderResult) -> QmaxArtifact:
    """The measured qmax artifact, for a gate of the user's own: `tts_qmax.q_max`, its rungs."""
    return tts_ladder.artifact


@pytest.fixture(scope="session")
def tts_plan(tts_options: RunOptions, tts_summary: list[str]) -> PlanArtifact:
    """The plan from --tts-qmax-artifact and --tts-ttotal-artifact, written where
    `tts-bench plan` writes it, for a gate of the user's own: thresholds, fleet size, findings.
    (The packaged plan scenario plans inside its test, so a refused input is its failure.)"""
    from pytest_tts_scaling.steps.plan import PlanStepInputs, run_plan
    from pytest_tts_scaling.steps.tracking import record_plan

    with one_line("plan", tts_summary):
        inputs = PlanStepInputs.from_options(tts_options)
        result = run_plan(inputs)
    tts_summary.extend(f"plan: {line}" for line in result.kept)
    tts_summary.extend(record_plan(result, inputs.tracking))
    return result.plan


@pytest.fixture(scope="session")
def tts_scale_timeline(
    request: pytest.FixtureRequest,
    tts_ttotal_inputs: TtotalInputs,
    tts_progress: Callable[[str], None],
    tts_summary: list[str],
) -> tuple[TtotalArtifact, Path]:
    """The measured scale-out timeline and where its artifact was written."""
    from pytest_tts_scaling.steps.tracking import record_ttotal
    from pytest_tts_scaling.steps.ttotal import require_qmax_artifact, run_ttotal, summary_lines

    inputs = tts_ttotal_inputs
    with one_line("ttotal", tts_summary):
        require_qmax_artifact(inputs)  # before the endpoint opens (a local one starts)
    endpoint: Endpoint = request.getfixturevalue("tts_endpoint")
    with one_line("ttotal", tts_summary):
        artifact, path = run_ttotal(endpoint, inputs, progress=tts_progress)
    tts_summary.extend(summary_lines(artifact, path))
    tts_summary.extend(record_ttotal(artifact, path, inputs.tracking, endpoint.name))
    return artifact, path


@pytest.fixture
def tts_report(request: pytest.FixtureRequest) -> ReportExtras:
    """Pictures, tables and text this test adds to its row of the HTML report."""
    from pytest_tts_scaling.report.extras import ReportExtras

    extras = ReportExtras()
    request.node.stash[EXTRAS_KEY] = extras
    return extras


# The fixtures this module gives every test (all named `tts_…`): a test that uses one measures.
PUBLIC = frozenset(
    name for name, value in dict(globals()).items() if name.startswith("tts_") and callable(value)
)
