"""What the qmax step takes: the endpoint, the workload, the SLO, the ladder, the word error
check, the gates on its answer, MLflow and where it writes; built by the doors from the parsed
options (:meth:`QmaxInputs.from_options`)."""

from __future__ import annotations

from pathlib import Path

from pytest_tts_scaling.endpoints.target import EndpointTarget
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps.inputs import (
    LadderInputs,
    OutputInputs,
    SloInputs,
    StepInputs,
    TrackingInputs,
    WorkloadInputs,
    named_alike,
    target_from_options,
)


class QualityInputs(StepInputs):
    """The opt-in word error check: `wer_sample` answers a rung transcribed (0: none)."""

    wer_sample: int = 0
    max_wer: float | None = None
    max_wer_increase: float | None = 0.1


class GateInputs(StepInputs):
    """What the answer is held against: the --baseline (a file, or `mlflow:...`), the
    --min-qmax floor, and whether an inconclusive answer fails."""

    baseline: Path | str | None = None
    regression_tolerance: float = 1.0
    allow_config_mismatch: bool = False
    min_qmax: int | None = None
    fail_on_inconclusive: bool = False


class QmaxInputs(StepInputs):
    """Everything `run_ladder`, the baseline gates and the MLflow run of the qmax step read."""

    target: EndpointTarget
    workload: WorkloadInputs
    slo: SloInputs
    ladder: LadderInputs
    quality: QualityInputs = QualityInputs()
    gates: GateInputs = GateInputs()
    tracking: TrackingInputs
    outputs: OutputInputs = OutputInputs()

    @classmethod
    def from_options(cls, options: RunOptions) -> QmaxInputs:
        """The one builder: the ladder's timing decided for the endpoint's kind (one line
        naming both flags where --measure-s is longer than --hold-s)."""
        settings = options.for_kind()
        return cls(
            target=target_from_options(options),
            workload=WorkloadInputs.from_options(options),
            slo=SloInputs.from_resolved(settings),
            ladder=LadderInputs.from_resolved(settings),
            quality=QualityInputs(**named_alike(options, QualityInputs.model_fields)),
            gates=GateInputs(**named_alike(options, GateInputs.model_fields)),
            tracking=TrackingInputs.from_options(options),
            outputs=OutputInputs.from_options(options),
        )
