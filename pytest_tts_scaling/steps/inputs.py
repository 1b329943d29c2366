"""The concerns the steps' inputs share, each a frozen model built from the parsed options.

A step takes its own inputs model (`steps/qmax/inputs.py`, ...), which nests these; the doors
build it from :class:`~pytest_tts_scaling.options.RunOptions` through the step's one
`from_options`, so no step below the doors reads the options themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pytest_tts_scaling.core.schema import SloMetric
from pytest_tts_scaling.endpoints.target import EndpointTarget
from pytest_tts_scaling.load.scenario import Scenario
from pytest_tts_scaling.load.workload import Workload, workload_for
from pytest_tts_scaling.options import ResolvedOptions, RunOptions


def given_files(every: tuple[Path, ...], first: Path | None) -> tuple[Path, ...]:
    """Every file an artifact option was given (`every`), or the one option set directly."""
    return every or (() if first is None else (first,))


class StepInputs(BaseModel):
    """Frozen, and refusing a field it does not have."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def named_alike(options: object, names: Iterable[str], **given: Any) -> dict[str, Any]:
    """The options' values for fields named as the options are (`given` ones aside): a model
    built from them reads each option under its own name, and a renamed option fails here."""
    return {**{name: getattr(options, name) for name in names if name not in given}, **given}


def target_from_options(options: RunOptions) -> EndpointTarget:
    """The endpoint the options name, and what opening it may do."""
    return EndpointTarget(**named_alike(options, EndpointTarget.model_fields))


class WorkloadInputs(StepInputs):
    """What each request says: the --scenario file as read (None: the built-in texts), the model
    named in artifacts, the inference component requests name, and the transport."""

    scenario: Scenario | None = None
    model: str
    component: str | None = None
    transport: str = "response-stream"

    @classmethod
    def from_options(cls, options: RunOptions) -> WorkloadInputs:
        return cls(
            scenario=options.loaded_scenario,
            model=options.model,
            component=options.inference_component,
            transport=options.transport,
        )

    def workload(self, endpoint_kind: str) -> Workload:
        return workload_for(
            self.scenario,
            model=self.model,
            component=self.component,
            transport=self.transport,
            endpoint_kind=endpoint_kind,
        )


class SloInputs(StepInputs):
    """The SLO a rung is judged against: p95 of `metric` <= `ms`; `tiers_ms` every tier Q_max is
    bracketed at, ascending, the largest `ms`."""

    ms: float
    tiers_ms: tuple[float, ...]
    metric: SloMetric = "ttfab"

    @classmethod
    def from_resolved(cls, settings: ResolvedOptions) -> SloInputs:
        return cls(
            ms=settings.slo_ms, tiers_ms=settings.slo_tiers_ms, metric=settings.run.slo_metric
        )


class LadderInputs(StepInputs):
    """The rungs' timing, decided for the endpoint's kind; `concurrencies` the --ladder given,
    None: the adaptive search up to `max_concurrency`."""

    concurrencies: tuple[int, ...] | None = None
    max_concurrency: int
    hold_s: float
    measure_s: float
    gap_s: float
    runs: int = 1
    no_confirm: bool = False
    allow_shallow_queue: bool = False

    @classmethod
    def from_resolved(cls, settings: ResolvedOptions) -> LadderInputs:
        return cls(
            concurrencies=settings.ladder,
            **named_alike(settings, ("max_concurrency", "hold_s", "measure_s", "gap_s")),
            **named_alike(settings.run, ("runs", "no_confirm", "allow_shallow_queue")),
        )


class TrackingInputs(StepInputs):
    """--mlflow: whether the step's run is recorded, where, under which name, and the workload
    file whose name and hash it keeps."""

    enabled: bool = False
    experiment: str
    run_name: str | None = None
    scenario: Scenario | None = None

    @classmethod
    def from_options(cls, options: RunOptions) -> TrackingInputs:
        return cls(
            enabled=options.mlflow,
            experiment=options.mlflow_experiment or f"tts-scaling-{options.model}",
            run_name=options.mlflow_run_name,
            scenario=options.loaded_scenario,
        )


class OutputInputs(StepInputs):
    """Where the step writes its artifacts, and whether it only says what it would do."""

    artifacts_dir: Path = Path("reports")
    dry_run: bool = False

    @classmethod
    def from_options(cls, options: RunOptions) -> OutputInputs:
        return cls(artifacts_dir=options.artifacts_dir, dry_run=options.dry_run)
