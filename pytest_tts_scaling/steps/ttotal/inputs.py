"""What the ttotal step takes: the endpoint, the qmax artifact it probes at, the probe's workload
and timing, where it writes and MLflow; built by the doors from the parsed options
(:meth:`TtotalInputs.from_options`)."""

from __future__ import annotations

from pathlib import Path

from pytest_tts_scaling.endpoints.target import EndpointTarget
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps.inputs import (
    StepInputs,
    TrackingInputs,
    WorkloadInputs,
    given_files,
    target_from_options,
)


class ProbeInputs(StepInputs):
    """The probe's timing, decided for the endpoint's kind: `hold_s` - `measure_s` of warm-up
    before the first window, and the window p95 TTFAB is read over."""

    hold_s: float
    measure_s: float


class TtotalInputs(StepInputs):
    """Everything `run_ttotal` and its scale timers read."""

    target: EndpointTarget
    workload: WorkloadInputs
    probe: ProbeInputs
    # Every --qmax-artifact given (ttotal refuses more or fewer than one).
    qmax_artifacts: tuple[Path, ...] = ()
    allow_config_mismatch: bool = False
    artifacts_dir: Path = Path("reports")
    tracking: TrackingInputs

    @classmethod
    def from_options(cls, options: RunOptions) -> TtotalInputs:
        """The one builder (the probe's timing from the ladder's defaults for the kind)."""
        settings = options.for_kind()
        return cls(
            target=target_from_options(options),
            workload=WorkloadInputs.from_options(options),
            probe=ProbeInputs(hold_s=settings.hold_s, measure_s=settings.measure_s),
            qmax_artifacts=given_files(options.qmax_artifacts, options.qmax_artifact),
            allow_config_mismatch=options.allow_config_mismatch,
            artifacts_dir=options.artifacts_dir,
            tracking=TrackingInputs.from_options(options),
        )
