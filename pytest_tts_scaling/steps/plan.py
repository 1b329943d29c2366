"""The plan step (docs/steps.md#plan): the policy from the qmax and ttotal artifacts, offline.

`tts-bench plan` and `pytest -m plan` both call :func:`run_plan`: read the artifacts (a pair per
instance type, with the price file that weighs them), derive the plan (core/plan, pure), write
``plan-{model}.json`` keeping an earlier, different one aside.
Each front door then prints or reports the result and fails on a stop finding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from pytest_tts_scaling.core.plan.inputs import PlanInputs
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps.inputs import StepInputs, TrackingInputs, given_files, named_alike

if TYPE_CHECKING:
    from pytest_tts_scaling.core.plan import PlanOutcome
    from pytest_tts_scaling.core.plan.candidates import Priced
    from pytest_tts_scaling.core.schema import Finding, PlanArtifact


class PlanStepInputs(StepInputs):
    """What the plan step takes: the artifacts (a pair per instance type), the price file that
    weighs them, the operator's choices, where the plan is written, and MLflow."""

    qmax_artifacts: tuple[Path, ...] = ()
    ttotal_artifacts: tuple[Path, ...] = ()
    prices: Path | None = None
    choices: PlanInputs
    artifacts_dir: Path = Path("reports")
    tracking: TrackingInputs

    @classmethod
    def from_options(cls, options: RunOptions) -> PlanStepInputs:
        """The one builder; artifacts are identified by file name only in the plan's inputs,
        so the same files give the same plan wherever they lie."""
        return cls(
            qmax_artifacts=given_files(options.qmax_artifacts, options.qmax_artifact),
            ttotal_artifacts=given_files(options.ttotal_artifacts, options.ttotal_artifact),
            prices=options.prices,
            choices=PlanInputs(
                **named_alike(
                    options,
                    (field.name for field in fields(PlanInputs)),
                    qmax_name=_name(options.qmax_artifact),
                    ttotal_name=_name(options.ttotal_artifact),
                )
            ),
            artifacts_dir=options.artifacts_dir,
            tracking=TrackingInputs.from_options(options),
        )


@dataclass(frozen=True)
class PlanRun:
    """The plan decided, where it was written, and what earlier plan was kept aside."""

    outcome: PlanOutcome
    path: Path
    kept: list[str]

    @property
    def plan(self) -> PlanArtifact:
        return self.outcome.artifact

    @property
    def stops(self) -> list[Finding]:
        return [f for f in self.plan.findings if f.verdict == "stop"]


def run_plan(inputs: PlanStepInputs) -> PlanRun:
    """Plan from --qmax-artifact and --ttotal-artifact (one pair per instance type, weighed by
    --prices); raises InputError on any bad input."""
    from pytest_tts_scaling.artifacts import kept_lines, load, save_keeping
    from pytest_tts_scaling.core.plan.candidates import pair_measurements, plan_candidates
    from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact, plan_filename

    qmax_files, ttotal_files = inputs.qmax_artifacts, inputs.ttotal_artifacts
    given = {"--qmax-artifact": qmax_files, "--ttotal-artifact": ttotal_files}
    missing = [flag for flag, paths in given.items() if not paths]
    if missing:
        raise InputError(
            f"plan needs {' and '.join(f'{both_flags(flag)} FILE' for flag in missing)}: the "
            f"artifacts of the qmax and ttotal steps (see {both_flags('--artifacts-dir')}, "
            "default reports/)"
        )
    measured = pair_measurements(
        [(path.name, load(path, QmaxArtifact)) for path in qmax_files],
        [(path.name, load(path, TtotalArtifact)) for path in ttotal_files],
    )
    priced = read_prices(inputs.prices) if inputs.prices is not None else None
    outcome = plan_candidates(measured, inputs.choices, priced)
    path = inputs.artifacts_dir / plan_filename(outcome.artifact.model)
    return PlanRun(outcome, path, kept_lines(save_keeping(outcome.artifact, path)))


def _name(path: Path | None) -> str | None:
    return PurePath(path).name if path else None


def read_prices(path: Path) -> Priced:
    """The price file, JSON or TOML by its suffix; InputError in one line naming the field."""
    import tomllib

    from pytest_tts_scaling.core.plan.candidates import Priced
    from pytest_tts_scaling.core.plan.prices import parse_prices

    flag = both_flags("--prices")
    if path.suffix not in (".json", ".toml"):
        raise InputError(f"{flag} {path}: expected a .json or .toml file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot read: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not TOML ({exc})") from None
    return Priced(parse_prices(raw, path.name), path.name)
