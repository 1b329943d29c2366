"""`pytest -m validate`: the deployed scaling configuration matches the plan, field by field.

    pytest -m validate --endpoint speech-kokoro-82m --plan-artifact reports/plan-kokoro-82m.json
        [--inference-component NAME]

One test case per field (JUnit XML names it); a mismatch fails with the deployed and the planned
value. Read-only.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.aws.validate import VALIDATE_FIELDS, FieldCheck
from pytest_tts_scaling.options import RunOptions

pytestmark = pytest.mark.validate


@pytest.fixture(scope="module")
def validate_checks(tts_options: RunOptions) -> dict[str, FieldCheck]:
    from pytest_tts_scaling.aws.clients import AwsClients
    from pytest_tts_scaling.aws.validate import run_validate
    from pytest_tts_scaling.commands.drift import plan_for
    from pytest_tts_scaling.errors import InputError

    if tts_options.endpoint is None:
        pytest.fail(
            "validate checks a deployed SageMaker endpoint: pass --endpoint NAME and "
            "--plan-artifact FILE",
            pytrace=False,
        )
    try:
        plan = plan_for(tts_options, required=True)
        assert plan is not None
        checks = run_validate(
            AwsClients(), tts_options.endpoint, plan, component=tts_options.inference_component
        )
    except InputError as exc:
        pytest.fail(f"validate: {exc}", pytrace=False)
    return {check.field: check for check in checks}


@pytest.mark.parametrize("field", VALIDATE_FIELDS)
def test_validate(validate_checks: dict[str, FieldCheck], field: str) -> None:
    check = validate_checks[field]
    assert check.ok, check.line()
