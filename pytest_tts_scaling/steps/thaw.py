"""The thaw step: restore an endpoint a hard-killed qmax/ttotal run left frozen
(docs/steps.md#thaw).

Only `tts-bench thaw` runs it (a killed pytest run is thawed from the command line); the
endpoint rule is drift's, so a missing `--endpoint` reads the same in every step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_tts_scaling.steps.drift import deployed_endpoint

if TYPE_CHECKING:
    from pytest_tts_scaling.steps.deployed import DeployedInputs


def run_thaw_step(inputs: DeployedInputs, *, log: Callable[[str], None]) -> str:
    """Thaw the endpoint (or its inference component) the inputs name; returns its name."""
    from pytest_tts_scaling.aws.clients import AwsClients
    from pytest_tts_scaling.aws.lifecycle.freeze import thaw

    endpoint = deployed_endpoint(inputs, "thaw")
    target = inputs.target
    thaw(
        AwsClients(),
        endpoint,
        artifacts_dir=target.artifacts_dir,
        log=log,
        component=target.inference_component,
        force=target.force,
    )
    return endpoint
