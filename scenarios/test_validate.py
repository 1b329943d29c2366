"""`pytest -m validate`: the deployed scaling configuration matches the plan, field by field.

    pytest -m validate --endpoint speech-kokoro-82m --tts-plan-artifact reports/plan-kokoro-82m.json
        [--tts-inference-component NAME]

One test case per field (JUnit XML names it); a mismatch fails with the deployed and the planned
value. Read-only.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.aws.checks.validate import VALIDATE_FIELDS, FieldCheck
from pytest_tts_scaling.failures import one_line
from pytest_tts_scaling.options import RunOptions

pytestmark = pytest.mark.validate


@pytest.fixture(scope="module")
def validate_checks(tts_options: RunOptions, tts_summary: list[str]) -> dict[str, FieldCheck]:
    from pytest_tts_scaling.steps.deployed import DeployedInputs
    from pytest_tts_scaling.steps.validate import run_validate_step, verdict_line

    with one_line("validate", tts_summary):
        checks = run_validate_step(DeployedInputs.from_options(tts_options))
    tts_summary.append(verdict_line(checks))
    return {check.field: check for check in checks}


@pytest.mark.parametrize("field", VALIDATE_FIELDS)
def test_validate(validate_checks: dict[str, FieldCheck], field: str) -> None:
    check = validate_checks[field]
    assert check.ok, check.line()
