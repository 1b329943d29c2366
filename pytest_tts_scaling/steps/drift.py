"""The drift step (docs/steps.md#drift): read-only preflight of a deployed endpoint, for both front
doors.

`tts-bench drift` and `pytest -m drift` call :func:`run_drift_step`; validate and thaw reuse
:func:`deployed_endpoint` and :func:`plan_for`, so the three name a missing endpoint or plan alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, overload

from pytest_tts_scaling.errors import InputError

if TYPE_CHECKING:
    from pytest_tts_scaling.aws.checks.drift import DriftReport
    from pytest_tts_scaling.core.schema import PlanArtifact
    from pytest_tts_scaling.steps.deployed import DeployedInputs


def deployed_endpoint(inputs: DeployedInputs, step: str) -> str:
    """`--endpoint`: these steps read a SageMaker endpoint; the local default has none."""
    if inputs.target.endpoint is None:
        raise InputError(f"{step} checks a deployed SageMaker endpoint: pass --endpoint NAME")
    return inputs.target.endpoint


@overload
def plan_for(inputs: DeployedInputs, *, required: Literal[True]) -> PlanArtifact: ...
@overload
def plan_for(inputs: DeployedInputs, *, required: bool) -> PlanArtifact | None: ...
def plan_for(inputs: DeployedInputs, *, required: bool) -> PlanArtifact | None:
    """`--plan-artifact`, else `plan-{model}.json` in the artifacts directory when it exists."""
    from pytest_tts_scaling.artifacts import load
    from pytest_tts_scaling.core.schema import PlanArtifact

    path = inputs.plan_path
    if inputs.plan_artifact is None and not path.exists() and not required:
        return None
    return load(path, PlanArtifact)


def run_drift_step(inputs: DeployedInputs) -> DriftReport:
    """Every drift check of the endpoint, held against the plan when there is one."""
    from pytest_tts_scaling.aws.checks.drift import run_drift
    from pytest_tts_scaling.aws.clients import AwsClients

    endpoint = deployed_endpoint(inputs, "drift")
    return run_drift(
        AwsClients(),
        endpoint,
        artifacts_dir=inputs.target.artifacts_dir,
        plan=plan_for(inputs, required=False),
        component=inputs.target.inference_component,
    )
