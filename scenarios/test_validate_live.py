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
(`pytest_tts_scaling.aws.checks.live`, written to live.fleet.json) for the same checks.

Checks: p95 TTFAB within the SLO at 80% of the planned load; rejections only where an instance
already held Q_max; under the plan's surge the first new instance serves within 1.5·T_total and
the shed fraction and the worst p95 stay within the plan's simulation of the same traffic;
every scale-in waits out its cooldowns.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_tts_scaling.core.live import Check
from pytest_tts_scaling.failures import one_line
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.report.extras import ReportExtras

pytestmark = pytest.mark.validate_live


@pytest.fixture(scope="module")
def live_checks(
    tts_options: RunOptions, tts_progress: Callable[[str], None], tts_summary: list[str]
) -> dict[str, Check]:
    from pytest_tts_scaling.steps.deployed import ValidateLiveInputs
    from pytest_tts_scaling.steps.validate_live import checks, run_validate_live

    with one_line("validate_live", tts_summary):
        inputs = ValidateLiveInputs.from_options(tts_options)
        run = run_validate_live(inputs, tts_progress)
    for line in run.load_output.splitlines():
        tts_progress(line)
    return checks(run)


def holds(checks: dict[str, Check], name: str, report: ReportExtras) -> None:
    """The check's numbers in the test's report row, and its verdict."""
    check = checks[name]
    report.text(check.detail, "validate_live")
    assert check, check.detail


def test_p95_within_slo_at_80_percent_of_planned_load(
    live_checks: dict[str, Check], tts_report: ReportExtras
) -> None:
    holds(live_checks, "steady_p95", tts_report)


def test_rejections_only_above_qmax_per_instance(
    live_checks: dict[str, Check], tts_report: ReportExtras
) -> None:
    holds(live_checks, "rejections", tts_report)


def test_surge_first_new_instance_serves_within_1_5_t_total(
    live_checks: dict[str, Check], tts_report: ReportExtras
) -> None:
    holds(live_checks, "first_new_instance", tts_report)


def test_surge_shed_fraction_within_the_plan_simulation(
    live_checks: dict[str, Check], tts_report: ReportExtras
) -> None:
    holds(live_checks, "surge_shed", tts_report)


def test_surge_worst_p95_within_the_plan_simulation(
    live_checks: dict[str, Check], tts_report: ReportExtras
) -> None:
    holds(live_checks, "surge_p95", tts_report)


def test_scale_in_only_after_its_cooldown(
    live_checks: dict[str, Check], tts_report: ReportExtras
) -> None:
    holds(live_checks, "scale_in", tts_report)
