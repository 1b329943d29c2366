"""`pytest -m drift`: read-only preflight of a deployed endpoint, one test per check.

    pytest -m drift --endpoint speech-kokoro-82m [--tts-plan-artifact reports/plan-kokoro-82m.json]
        [--tts-inference-component NAME]

Each check is its own test case (JUnit XML names it): an error finding fails it, a warning is
printed in the `tts-scaling` summary and passes. Nothing on AWS is changed.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.aws.checks.drift import DRIFT_CHECKS, DriftReport
from pytest_tts_scaling.failures import one_line
from pytest_tts_scaling.options import RunOptions

pytestmark = pytest.mark.drift


@pytest.fixture(scope="module")
def drift_report(tts_options: RunOptions, tts_summary: list[str]) -> DriftReport:
    from pytest_tts_scaling.steps.deployed import DeployedInputs
    from pytest_tts_scaling.steps.drift import run_drift_step

    with one_line("drift", tts_summary):
        report = run_drift_step(DeployedInputs.from_options(tts_options))
    tts_summary.extend(f"drift {finding.line()}" for finding in report.warnings)
    tts_summary.append(report.lines()[-1])
    return report


@pytest.mark.parametrize("check", DRIFT_CHECKS)
def test_drift(drift_report: DriftReport, check: str) -> None:
    errors = [f for f in drift_report.for_check(check) if f.severity == "error"]
    assert not errors, "\n".join(f.line() for f in errors)
