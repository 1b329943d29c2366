"""The validate step (docs/steps.md#validate): the deployed scaling configuration against the plan,
field by field.

`tts-bench validate` prints every check and exits by :func:`verdict_line`'s verdict;
`pytest -m validate` makes each check a test case.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_tts_scaling.steps.drift import deployed_endpoint, plan_for

if TYPE_CHECKING:
    from pytest_tts_scaling.aws.checks.validate import FieldCheck
    from pytest_tts_scaling.steps.deployed import DeployedInputs


def run_validate_step(inputs: DeployedInputs) -> list[FieldCheck]:
    """Each planned field read back from the endpoint (or its inference component). Read-only."""
    from pytest_tts_scaling.aws.checks.validate import run_validate
    from pytest_tts_scaling.aws.clients import AwsClients

    endpoint = deployed_endpoint(inputs, "validate")
    plan = plan_for(inputs, required=True)
    return run_validate(AwsClients(), endpoint, plan, component=inputs.target.inference_component)


def verdict_line(checks: list[FieldCheck]) -> str:
    failed = [c for c in checks if not c.ok]
    if failed:
        return f"validate-failed: {len(failed)} of {len(checks)} field(s) differ from the plan"
    return f"validate-ok: {len(checks)} fields match the plan"
