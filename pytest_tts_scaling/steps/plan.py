"""The plan step (docs/steps.md#plan): the policy from the qmax and ttotal artifacts, offline.

`tts-bench plan` and `pytest -m plan` both call :func:`run_plan`: read the two artifacts, derive
the plan (core/plan, pure), write ``plan-{model}.json`` keeping an earlier, different one aside.
Each front door then prints or reports the result and fails on a stop finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import InputError

if TYPE_CHECKING:
    from pytest_tts_scaling.core.plan import PlanOutcome
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
    """Plan from --qmax-artifact and --ttotal-artifact; raises InputError on any bad input."""
    from pytest_tts_scaling.artifacts import kept_lines, load, save_keeping
    from pytest_tts_scaling.core.plan import compute_plan, inputs_from_options
    from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact, plan_filename

    given = {"--qmax-artifact": options.qmax_artifact, "--ttotal-artifact": options.ttotal_artifact}
    missing = [flag for flag, path in given.items() if path is None]
    if missing:
        raise InputError(
            f"plan needs {' and '.join(f'{both_flags(flag)} FILE' for flag in missing)}: the "
            f"artifacts of the qmax and ttotal steps (see {both_flags('--artifacts-dir')}, "
            "default reports/)"
        )
    assert options.qmax_artifact is not None
    assert options.ttotal_artifact is not None
    outcome = compute_plan(
        load(options.qmax_artifact, QmaxArtifact),
        load(options.ttotal_artifact, TtotalArtifact),
        inputs_from_options(options),
    )
    path = Path(options.artifacts_dir) / plan_filename(outcome.artifact.model)
    return PlanRun(outcome, path, kept_lines(save_keeping(outcome.artifact, path)))
