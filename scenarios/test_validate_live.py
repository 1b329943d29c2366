"""`pytest -m validate_live`: the plan under live load, one test case per check (opt-in).

    pytest -m validate_live                 # the rehearsal on the local fleet (about 2 minutes)
    pytest -m validate_live --endpoint speech-kokoro-82m   # the deployed plan, at its own pace

With no endpoint named, the plan is measured here (the qmax ladder on a calibration instance,
an emulated T_total) and replayed on a local fleet of such instances behind a least-outstanding
router, scaled by an emulation of the plan's policy, at 1/20 of the plan's time. The load is
`tts-bench load --trace` in its own process. Artifacts, the trace and the per-request records go
to ARTIFACTS_DIR/validate-live/.

With `--endpoint NAME` the plan is ARTIFACTS_DIR/plan-MODEL.json (or --tts-plan-artifact) and its
traffic runs at the plan's own pace against the SageMaker endpoint; the fleet's scale-outs and
scale-ins, instance counts and per-instance in-flight are read back from AWS
(`pytest_tts_scaling.aws.live`, written to live.fleet.json) for the same checks.

Checks: p95 TTFAB within the SLO at 80% of the planned load; rejections only where an instance
already held Q_max; under the plan's surge the first new instance serves within 1.5·T_total and
the shed fraction and the worst p95 stay within the plan's simulation of the same traffic;
every scale-in waits out its cooldowns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_tts_scaling.fleet import live
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.report.extras import ReportExtras

if TYPE_CHECKING:
    from pytest_tts_scaling.fleet.rehearsal import LiveRun

pytestmark = pytest.mark.validate_live


@pytest.fixture(scope="module")
def live_run(tts_options: RunOptions, tts_progress: Callable[[str], None]) -> LiveRun:
    from pytest_tts_scaling.fleet.rehearsal import rehearsal_plan, replay

    if tts_options.kind == "url":
        pytest.fail(
            "validate_live --endpoint-url: a plain URL has no scaling activity or per-instance "
            "in-flight to read; expected --endpoint NAME (a SageMaker endpoint with the plan "
            "deployed) or neither (the rehearsal on a local fleet)",
            pytrace=False,
        )
    workdir = tts_options.artifacts_dir / "validate-live"
    workdir.mkdir(parents=True, exist_ok=True)
    if tts_options.kind == "sagemaker":
        run = deployed_run(tts_options, workdir, tts_progress)
    else:
        run = replay(rehearsal_plan(workdir, tts_progress), workdir, tts_progress)
    for line in run.load_output.splitlines():
        tts_progress(line)
    return run


def deployed_run(options: RunOptions, workdir: Path, progress: Callable[[str], None]) -> LiveRun:
    """The plan's traffic at its own pace against the SageMaker endpoint; what its fleet did is
    read from Application Auto Scaling, DescribeEndpoint and CloudWatch."""
    from pytest_tts_scaling.aws.clients import AwsClients
    from pytest_tts_scaling.aws.live import deployed_plan, replay_deployed
    from pytest_tts_scaling.errors import InputError

    assert options.endpoint is not None
    from pytest_tts_scaling.load.host import usable_cores

    load_args = ["--model", options.model, "--transport", options.transport]
    if options.scenario:
        load_args += ["--scenario", options.scenario]
    if (cores := len(usable_cores())) > 1:
        # A fleet's peak is more streams than one process keeps time for: one per core.
        load_args += ["--processes", str(cores)]
    try:
        if options.inference_component:
            raise InputError(
                "--tts-inference-component: validate_live reads a variant's instances, not an "
                "inference component's copies; expected --endpoint NAME alone"
            )
        outcome = deployed_plan(options, progress)
        return replay_deployed(
            outcome,
            workdir,
            progress,
            clients=AwsClients(),
            endpoint=options.endpoint,
            load_args=load_args,
        )
    except InputError as exc:
        failure = f"validate_live: {exc}"
    pytest.fail(failure, pytrace=False)  # outside the handler: one line, no chained traceback


def holds(check: live.Check, report: ReportExtras, *more: str) -> None:
    """The check's numbers in the test's report row, and its verdict."""
    detail = "; ".join([check.detail, *more])
    report.text(detail, "validate_live")
    assert check, detail


def test_p95_within_slo_at_80_percent_of_planned_load(
    live_run: LiveRun, tts_report: ReportExtras
) -> None:
    run = live_run
    holds(live.check_steady_p95(run.rows, run.t0_ns, run.traffic, run.slo_ms), tts_report)


def test_rejections_only_above_qmax_per_instance(
    live_run: LiveRun, tts_report: ReportExtras
) -> None:
    holds(live.check_rejections(live_run.log.dispatches, live_run.q_max), tts_report)


def test_surge_first_new_instance_serves_within_1_5_t_total(
    live_run: LiveRun, tts_report: ReportExtras
) -> None:
    run = live_run
    check = live.check_first_new_instance(run.log.events, run.t0_ns, run.traffic)
    holds(check, tts_report, live.first_capacity_line(run.prediction))


def test_surge_shed_fraction_within_the_plan_simulation(
    live_run: LiveRun, tts_report: ReportExtras
) -> None:
    run = live_run
    holds(live.check_surge_shed(run.rows, run.t0_ns, run.traffic, run.prediction), tts_report)


def test_surge_worst_p95_within_the_plan_simulation(
    live_run: LiveRun, tts_report: ReportExtras
) -> None:
    run = live_run
    holds(live.check_surge_p95(run.rows, run.t0_ns, run.traffic, run.prediction), tts_report)


def test_scale_in_only_after_its_cooldown(live_run: LiveRun, tts_report: ReportExtras) -> None:
    holds(live.check_scale_in(live_run.log.events, live_run.traffic), tts_report)
