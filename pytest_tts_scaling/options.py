"""What the user asked for, parsed once into frozen dataclasses, and resolved per endpoint kind.

The flags and their parsers are the option table (:mod:`pytest_tts_scaling.option_table`);
:class:`RunOptions` is what they parse to, and :meth:`RunOptions.for_kind` decides the ladder
timing for the endpoint being measured (:class:`ResolvedOptions`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tts_scaling.core.defaults import DEFAULT_MODEL, EndpointKind, endpoint_kind

if TYPE_CHECKING:
    from pytest_tts_scaling.core.schema import SloMetric
    from pytest_tts_scaling.load.scenario import Scenario

DEFAULT_SLO_MS = 3000.0
DEFAULT_SURGE_RATIO = 1.25
DEFAULT_MAX_CONCURRENCY = 256


@dataclass(frozen=True)
class LadderDefaults:
    """Rung timing: the published method's values for a real endpoint, smaller for a 2-core CPU."""

    hold_s: float
    measure_s: float
    gap_s: float


METHOD_LADDER = LadderDefaults(hold_s=240.0, measure_s=60.0, gap_s=30.0)
# The trained Kokoro-82M on one of 2 CPU cores (the other is the client's) serves a 14-word request
# in about 3 s (RTF 0.6, first audio 1.3-1.5 s; benchmarks/real_model.py), so a handful of rungs
# of 25 s each finds its Q_max in a few minutes.
LOCAL_LADDER = LadderDefaults(hold_s=25.0, measure_s=15.0, gap_s=2.0)


@dataclass(frozen=True)
class RunOptions:
    """What the user asked for, parsed; local defaults resolved by :meth:`for_kind`."""

    endpoint: str | None = None
    endpoint_url: str | None = None
    model_dir: Path | None = None
    scenario: str | None = None
    inference_component: str | None = None
    model: str = DEFAULT_MODEL
    transport: str = "response-stream"
    slo_ms: float | None = None
    # With several --slo-ms values: every tier, ascending (slo_ms is then the largest).
    slo_tiers_ms: tuple[float, ...] = ()
    # The clock the SLO holds: ttfab, audible or playback (docs/method.md#the-listeners-clocks).
    slo_metric: SloMetric = "ttfab"
    ladder: tuple[int, ...] | None = None
    max_concurrency: int | None = None
    hold_s: float | None = None
    measure_s: float | None = None
    gap_s: float | None = None
    runs: int = 1
    min_qmax: int | None = None
    fail_on_inconclusive: bool = False
    no_confirm: bool = False
    # How long the first request may take (a URL's; SageMaker's is its own 60 s).
    invocation_limit_s: float = 60.0
    dry_run: bool = False
    artifacts_dir: Path = Path("reports")
    allow_config_mismatch: bool = False
    allow_shallow_queue: bool = False
    wer_sample: int = 0
    max_wer: float | None = None
    max_wer_increase: float | None = 0.1
    force: bool = False
    export_csv: Path | None = None
    mlflow: bool = False
    mlflow_experiment: str | None = None
    mlflow_run_name: str | None = None
    qmax_artifact: Path | None = None
    ttotal_artifact: Path | None = None
    # Every --qmax-artifact and --ttotal-artifact given, in order (plan weighs each instance type);
    # the two above are the first of each.
    qmax_artifacts: tuple[Path, ...] = ()
    ttotal_artifacts: tuple[Path, ...] = ()
    prices: Path | None = None
    hourly_rps: tuple[float, ...] | None = None
    plan_artifact: Path | None = None
    surge_ratio: float = DEFAULT_SURGE_RATIO
    peak_rps: float | None = None
    trough_rps: float = 0.0
    min_floor: int = 1
    # A qmax artifact file, or an MLflow run (`mlflow:RUN_ID`, `mlflow:experiment=NAME`).
    baseline: Path | str | None = None
    regression_tolerance: float = 1.0
    # The file --scenario named, as read (its settings already filled the fields above).
    loaded_scenario: Scenario | None = field(default=None, compare=False)

    @property
    def kind(self) -> EndpointKind:
        return endpoint_kind(self.endpoint, self.endpoint_url)

    def for_kind(self) -> ResolvedOptions:
        base = LOCAL_LADDER if self.kind == "local" else METHOD_LADDER
        hold = self.hold_s if self.hold_s is not None else base.hold_s
        measure = self.measure_s if self.measure_s is not None else min(base.measure_s, hold)
        if measure > hold:
            from pytest_tts_scaling.core.spelling import both_flags

            raise argparse.ArgumentTypeError(
                f"{both_flags('--measure-s')} {measure:g} is longer than "
                f"{both_flags('--hold-s')} {hold:g}: the measured window is the end of the hold, "
                "so expected the measured seconds <= the held seconds"
            )
        return ResolvedOptions(
            run=self,
            slo_ms=self.slo_ms if self.slo_ms is not None else DEFAULT_SLO_MS,
            ladder=self.ladder,
            max_concurrency=self.max_concurrency or DEFAULT_MAX_CONCURRENCY,
            hold_s=hold,
            measure_s=measure,
            gap_s=self.gap_s if self.gap_s is not None else base.gap_s,
        )

    @classmethod
    def from_namespace(
        cls, values: Mapping[str, Any], scenario_dirs: Sequence[Path] = (Path("scenarios"),)
    ) -> RunOptions:
        """Build from parsed option dests (`tts_ladder` → `ladder`); dests that are not run
        options (a subcommand's own arguments) are not kept.

        Options left unset take the scenario's values (when --scenario names one), then the
        defaults.
        """
        names = {f.name for f in fields(cls)}
        known: dict[str, Any] = {}
        for dest, value in values.items():
            key = dest.removeprefix("tts_")
            if key in names:
                known[key] = value
        for key in ("qmax_artifact", "ttotal_artifact"):
            if isinstance(known.get(key), list):
                known[f"{key}s"] = tuple(known[key])
                known[key] = known[key][0] if known[key] else None
        if known.get("scenario"):
            from pytest_tts_scaling.load.scenario import load_scenario, resolve

            scenario = load_scenario(resolve(known["scenario"], list(scenario_dirs)))
            known["loaded_scenario"] = scenario
            for key, value in scenario.settings().items():
                if known.get(key) is None:
                    known[key] = value
        known["model"] = known.get("model") or DEFAULT_MODEL
        known["transport"] = known.get("transport") or "response-stream"
        known["slo_metric"] = known.get("slo_metric") or "ttfab"
        if isinstance(known.get("slo_ms"), tuple):
            known["slo_tiers_ms"] = known["slo_ms"]
            known["slo_ms"] = max(known["slo_ms"])
        if known.get("endpoint") and known.get("endpoint_url"):
            raise argparse.ArgumentTypeError(
                "--endpoint and --endpoint-url both given: expected at most one of them"
            )
        return cls(**known)


@dataclass(frozen=True)
class ResolvedOptions:
    """Options with every ladder value decided for the kind of endpoint being measured."""

    run: RunOptions
    slo_ms: float
    # None: the adaptive search, up to `max_concurrency`.
    ladder: tuple[int, ...] | None
    max_concurrency: int
    hold_s: float
    measure_s: float
    gap_s: float

    @property
    def slo_tiers_ms(self) -> tuple[float, ...]:
        """Every SLO the run brackets Q_max at, ascending; the largest is `slo_ms`."""
        return self.run.slo_tiers_ms or (self.slo_ms,)
