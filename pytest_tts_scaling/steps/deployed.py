"""What the steps that read a deployed endpoint take (drift, validate, thaw; validate_live adds
its load's workload): the endpoint, the model whose plan it serves, and that plan's file; built
by the doors from the parsed options (each model's `from_options`)."""

from __future__ import annotations

from pathlib import Path

from pytest_tts_scaling.core.schema import plan_filename
from pytest_tts_scaling.endpoints.target import EndpointTarget
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps.inputs import StepInputs, target_from_options


class DeployedInputs(StepInputs):
    """drift's, validate's and thaw's: the endpoint, and the plan it is held against."""

    target: EndpointTarget
    model: str
    # --plan-artifact; None: plan-{model}.json in the artifacts directory.
    plan_artifact: Path | None = None

    @classmethod
    def from_options(cls, options: RunOptions) -> DeployedInputs:
        return cls(
            target=target_from_options(options),
            model=options.model,
            plan_artifact=options.plan_artifact,
        )

    @property
    def plan_path(self) -> Path:
        """--plan-artifact, else where `tts-bench plan` writes the model's plan."""
        return self.plan_artifact or self.target.artifacts_dir / plan_filename(self.model)


class ValidateLiveInputs(DeployedInputs):
    """validate_live's: the deployed endpoint's, and what its `tts-bench load` sends (the
    transport, and --scenario as given: the load resolves it as the user's command would)."""

    transport: str = "response-stream"
    scenario: str | None = None

    @classmethod
    def from_options(cls, options: RunOptions) -> ValidateLiveInputs:
        deployed = DeployedInputs.from_options(options)
        return cls(
            **dict(deployed),
            transport=options.transport,
            scenario=options.scenario,
        )
