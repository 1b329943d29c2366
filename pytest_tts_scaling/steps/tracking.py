"""--mlflow: each step's run recorded in MLflow, after its artifacts are written, never instead.

Both front doors call these once a step is done (the qmax step once its gates are decided): the
step's page is written beside its artifact, the run holds the parameters, metrics and tags of
:mod:`pytest_tts_scaling.core.tracking` and the files as artifacts. Whatever goes wrong on the
way to the tracking server ends in one line; the measurement and its verdict stay as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tts_scaling.core.tracking import (
    PASS,
    RunRecord,
    Verdict,
    plan_record,
    qmax_record,
    ttotal_record,
)

if TYPE_CHECKING:
    from pytest_tts_scaling.core.compare import Comparison
    from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact
    from pytest_tts_scaling.report.extras import Shown
    from pytest_tts_scaling.steps.inputs import TrackingInputs
    from pytest_tts_scaling.steps.plan import PlanRun
    from pytest_tts_scaling.steps.qmax import LadderResult
    from pytest_tts_scaling.steps.qmax.inputs import GateInputs, QmaxInputs

FAIL = "fail"
INCONCLUSIVE = "inconclusive"


def run_name(tracking: TrackingInputs, step: str, subject: str) -> str:
    """`NAME STEP`: --mlflow-run-name, else what was measured (the endpoint's name)."""
    return f"{tracking.run_name or subject} {step}"


def scenario_params(record: RunRecord, tracking: TrackingInputs) -> None:
    """The workload file's name and a hash of what it holds (its path left out)."""
    scenario = tracking.scenario
    if scenario is None:
        record.param("scenario", "none (built-in texts)")
        return
    text = scenario.model_dump_json(exclude={"path"})
    record.param("scenario", scenario.name)
    record.param("scenario_hash", hashlib.sha256(text.encode()).hexdigest()[:16])


def qmax_verdict(
    artifact: QmaxArtifact, gates: GateInputs, comparison: Comparison | None
) -> Verdict:
    """The qmax step's gates as `tts-bench qmax` exits on them: no Q_max, the --min-qmax floor,
    a regression against the baseline, an inconclusive answer (failing with
    --fail-on-inconclusive), a run that stopped early."""
    from pytest_tts_scaling.core.verdicts import doubt_line
    from pytest_tts_scaling.steps.baseline import below_minimum
    from pytest_tts_scaling.steps.qmax.words import no_qmax_message

    failed: list[str] = []
    if not artifact.complete:
        failed.append(f"stopped early: {artifact.stop_reason}")
    if artifact.q_max is None:
        failed.append(no_qmax_message(artifact))
    elif (floor := below_minimum(artifact, gates)) is not None:
        failed.append(floor)
    if comparison is not None and not comparison.ok:
        failed.append(comparison.verdict_line())
    doubt = doubt_line(artifact)
    if doubt is not None and gates.fail_on_inconclusive:
        failed.append(doubt)
    if failed:
        return Verdict(FAIL, tuple(failed))
    if doubt is not None:
        return Verdict(INCONCLUSIVE, (doubt,))
    return Verdict(PASS)


def ttotal_verdict(artifact: TtotalArtifact) -> Verdict:
    """The ttotal scenario's checks: the new instance served, stages in order, traffic back."""
    failed: list[str] = []
    if "in_service" not in {s.stage for s in artifact.stages}:
        failed.append("the new instance never reached service")
    if artifact.out_of_order_stages:
        failed.append(f"stages out of order: {', '.join(artifact.out_of_order_stages)}")
    if not artifact.probe.get("recovered"):
        failed.append("probe p95 TTFAB never came back after the scale-out")
    return Verdict(FAIL, tuple(failed)) if failed else Verdict(PASS)


def record_qmax(
    result: LadderResult, inputs: QmaxInputs, comparison: Comparison | None = None
) -> list[str]:
    """The qmax run: the artifact, its per-request records and inputs, and its page."""
    from pytest_tts_scaling.report.extras import Shown

    artifact = result.artifact

    def build() -> RunRecord:
        record = qmax_record(artifact, qmax_verdict(artifact, inputs.gates, comparison))
        scenario_params(record, inputs.tracking)
        image_commit = artifact.deployed_config.container_env.get("GIT_COMMIT") or (
            artifact.provenance.git_commit
            if artifact.deployed_config.instance_type == "local"
            else None
        )
        if image_commit:
            record.tags["tts.image_git_commit"] = image_commit
        if comparison is not None:
            record.tags["tts.baseline"] = comparison.baseline_name
            record.metric("baseline_regressions", len(comparison.regressions))
        return record

    sent = result.path.with_name(artifact.inputs_file) if artifact.inputs_file else None
    files = [result.path, result.records_path, *([sent] if sent else [])]
    shown = Shown(artifact, result.path)
    return _record("qmax", inputs.tracking, artifact.endpoint, build, files, shown)


def record_ttotal(
    artifact: TtotalArtifact, path: Path, tracking: TrackingInputs, endpoint: str
) -> list[str]:
    from pytest_tts_scaling.report.extras import Shown, timed_stages

    def build() -> RunRecord:
        record = ttotal_record(artifact, ttotal_verdict(artifact), timed_stages(artifact))
        scenario_params(record, tracking)
        return record

    return _record("ttotal", tracking, endpoint, build, [path], Shown(artifact, path))


def record_plan(result: PlanRun, tracking: TrackingInputs) -> list[str]:
    from pytest_tts_scaling.report.extras import Shown

    plan = result.plan
    stops = tuple(f"{f.name}: {f.detail}" for f in result.stops)
    verdict = Verdict(FAIL, stops) if stops else Verdict(PASS)
    return _record(
        "plan",
        tracking,
        plan.slug,
        lambda: plan_record(plan, verdict),
        [result.path],
        Shown(plan, result.path, result.outcome),
    )


def _record(
    step: str,
    tracking: TrackingInputs,
    subject: str,
    build: Callable[[], RunRecord],
    files: Sequence[Path],
    shown: Shown,
) -> list[str]:
    """Write the step's page beside its artifact, then record the run; any failure is one line."""
    if not tracking.enabled:
        return []
    from pytest_tts_scaling.optional import missing_extra
    from pytest_tts_scaling.report.pages import view_for, write_page

    experiment = tracking.experiment
    try:
        page = write_page(view_for(shown), shown.path.with_suffix(".html"))
        from pytest_tts_scaling.tracking.mlflow_runs import record_run, tracking_uri

        run_id = record_run(
            build(),
            [*files, page],
            experiment=experiment,
            run_name=run_name(tracking, step, subject),
        )
        where = tracking_uri()
    except Exception as exc:
        from pytest_tts_scaling.tracking.mlflow_runs import error_line

        if isinstance(exc, ModuleNotFoundError) and (missing := missing_extra(exc)) is not None:
            return [f"mlflow: not recorded: {missing}"]
        return [f"mlflow: not recorded (the artifacts are kept): {error_line(exc)}"]
    return [f"mlflow: {step} run {run_id} in experiment {experiment!r} at {where}"]
