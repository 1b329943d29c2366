"""The plan step (docs/steps.md#plan): the policy from the qmax and ttotal artifacts, offline.

`tts-bench plan` and `pytest -m plan` both call :func:`run_plan`: read the artifacts (a pair per
instance type, with the price file that weighs them), derive the plan (core/plan, pure), write
``plan-{model}.json`` keeping an earlier, different one aside.
Each front door then prints or reports the result and fails on a stop finding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import InputError

if TYPE_CHECKING:
    from pytest_tts_scaling.core.plan import PlanOutcome
    from pytest_tts_scaling.core.plan.candidates import Priced
    from pytest_tts_scaling.core.schema import Finding, PlanArtifact
    from pytest_tts_scaling.options import RunOptions


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


def run_plan(options: RunOptions) -> PlanRun:
    """Plan from --qmax-artifact and --ttotal-artifact (one pair per instance type, weighed by
    --prices); raises InputError on any bad input."""
    from pytest_tts_scaling.artifacts import kept_lines, load, save_keeping
    from pytest_tts_scaling.core.plan import inputs_from_options
    from pytest_tts_scaling.core.plan.candidates import pair_measurements, plan_candidates
    from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact, plan_filename

    qmax_files = options.qmax_artifacts or _one(options.qmax_artifact)
    ttotal_files = options.ttotal_artifacts or _one(options.ttotal_artifact)
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
    priced = read_prices(options.prices) if options.prices is not None else None
    outcome = plan_candidates(measured, inputs_from_options(options), priced)
    path = Path(options.artifacts_dir) / plan_filename(outcome.artifact.model)
    return PlanRun(outcome, path, kept_lines(save_keeping(outcome.artifact, path)))


def _one(path: Path | None) -> tuple[Path, ...]:
    return () if path is None else (path,)


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
