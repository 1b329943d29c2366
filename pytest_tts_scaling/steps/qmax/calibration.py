"""Measure a calibration case for real: its reference server, `run_ladder`, a URL endpoint.

Shared by `benchmarks/truth.py` and the matrix tests, so both judge the same thing: the answer
qmax gives, as a user would get it, against the case's truth.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from pytest_tts_scaling.artifacts import load
from pytest_tts_scaling.calibration.cases import CALIBRATION_KEY, Case, Outcome
from pytest_tts_scaling.calibration.truth import truth_for
from pytest_tts_scaling.core.schema import QmaxArtifact
from pytest_tts_scaling.core.verdicts import word
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.errors import ToolError
from pytest_tts_scaling.load.scenario import load_scenario, resolve
from pytest_tts_scaling.load.workload import Workload
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps.qmax import run_ladder
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs

# The share of each rung's hold that is measured; the rest is warm-up.
MEASURED_SHARE = 2 / 3


@dataclass(frozen=True)
class Measurement:
    outcome: Outcome
    wall_s: float
    rungs: int
    # The artifact's rungs by concurrency: `N=6 remeasure pass 230 ms (before: unusable:…)`.
    story: tuple[str, ...] = ()


def integer_ladder(case: Case) -> tuple[int, ...]:
    """Every integer from 1 to the server's capacity Q_max + 1 (the exhaustive ladder) on the
    SLO's clock; under hang-ups, the capacity they leave."""
    if case.hang_up is not None:
        q_max = case.truth().q_max or 0
    else:
        q_max = truth_for(case.clock_discipline(), case.slo_ms).q_max or 0
    return tuple(range(1, q_max + 2))


def measure(
    case: Case,
    *,
    ladder: tuple[int, ...] | None,
    hold_s: float,
    artifacts_dir: Path,
    progress: Callable[[str], None] = lambda line: None,
) -> Measurement:
    """One qmax run against a fresh server of the case; `ladder` None is the adaptive search.

    A run the tool ends with its own one-line error (an endpoint that stopped answering, say)
    is an outcome; any other exception is a bug and propagates.
    """
    with case.server() as server:
        inputs = QmaxInputs.from_options(
            RunOptions(
                endpoint_url=server.base_url,
                slo_ms=case.slo_ms,
                slo_metric=case.slo_metric,
                ladder=ladder,
                hold_s=hold_s,
                measure_s=hold_s * MEASURED_SHARE,
                gap_s=0.0,
                artifacts_dir=artifacts_dir,
            )
        )
        started = time.monotonic()
        try:
            result = run_ladder(
                UrlEndpoint(server.base_url),
                inputs,
                progress=progress,
                workload=scenario_workload(case, inputs.workload.model),
            )
        except ToolError as exc:
            outcome = Outcome(q_max=None, bracketed=False, error=str(exc))
            return Measurement(
                outcome, time.monotonic() - started, rungs=_rungs_kept(artifacts_dir)
            )
        wall_s = time.monotonic() - started
    rungs = result.artifact.rungs
    story = tuple(
        f"N={r.concurrency} {r.phase} {word(r)} {_ms(r.ttfab_ms.p95)}"
        + (f" (before: {', '.join(r.earlier)})" if r.earlier else "")
        for r in rungs
    )
    return Measurement(Outcome.of(result.artifact), wall_s, rungs=len(rungs), story=story)


def scenario_workload(case: Case, model: str) -> Workload | None:
    """The case's shipped scenario, its key read from the environment as a user's would be; a
    hang-up case's listener."""
    if case.hang_up is not None:
        return Workload(model=model, hang_up=case.hang_up)
    if case.scenario is None:
        return None
    with mock.patch.dict(os.environ, {"OPENAI_API_KEY": CALIBRATION_KEY}):
        scenario = load_scenario(resolve(case.scenario, []))
        return Workload.from_scenario(scenario, model=model)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def _rungs_kept(artifacts_dir: Path) -> int:
    """Rungs in the artifact a stopped run left behind (none when it stopped before rung 1)."""
    kept = sorted(artifacts_dir.glob("qmax-*.json"))
    return len(load(kept[0], QmaxArtifact).rungs) if kept else 0
