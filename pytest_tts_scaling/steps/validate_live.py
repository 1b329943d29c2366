"""The validate_live step: the plan under live load, on a local fleet or a deployed endpoint.

`run_validate_live` picks the path and holds the refusals both front doors show. With no
endpoint named, validate_live is rehearsed on one machine, a plan measured here and replayed on
the local fleet:

1. Q_max of one calibration instance is measured with the qmax ladder (the real engine, real
   HTTP). Its T_total is emulated: the local fleet boots a new instance `BOOT_S` after the
   decision, and the policy's detection lag is the plan's usual bound, so the ttotal artifact
   says so (trigger `emulated`).
2. The plan is computed from both (the pure `compute_plan`), sized so the surge starts on two
   instances and may grow to three.
3. The validate_live traffic (`live.live_traffic`, time-compressed by `time_scale`) is written as
   a trace of send times and replayed by `tts-bench load --trace` in its own processes (Locust
   never enters this one) against the fleet's router, while the fleet scales by the plan.

With `--endpoint NAME` the plan is the deployed model's plan artifact and its traffic runs at the
plan's own pace against the SageMaker endpoint, while `aws/checks/live.py` reads what the fleet did.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tts_scaling import __version__
from pytest_tts_scaling.artifacts import save, write_atomic
from pytest_tts_scaling.calibration import Faults, SerialStreamServer
from pytest_tts_scaling.core import arrivals, live
from pytest_tts_scaling.core.live import (
    Check,
    FleetLog,
    LiveTraffic,
    Prediction,
    live_traffic,
    predict,
)
from pytest_tts_scaling.core.plan import PlanInputs, PlanOutcome, compute_plan
from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.core.schema import Provenance, QmaxArtifact, Stage, TtotalArtifact
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.core.timeline import DEFAULT_POLICY_LAG_S, iso
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.fleet.localfleet import LocalFleet

if TYPE_CHECKING:
    from pytest_tts_scaling.aws.clients import AwsClients
    from pytest_tts_scaling.steps.deployed import DeployedInputs, ValidateLiveInputs

MODEL = "calibration"
# Above one request's 0.4 s, so the plan has a queueing budget (W_max); below the 0.45 s a 17th
# request waits for a slot, so Q_max is the 16 slots.
SLO_MS = 420.0
# One instance: 16 requests at once, 0.4 s each, first audio after 50 ms (40 rps at most).
INSTANCE: dict[str, Any] = {"slots": 16, "service_s": 0.4, "first_audio_s": 0.05, "chunks": 2}
LADDER = (1, 8, 16, 17)
HOLD_S, MEASURE_S, GAP_S = 2.5, 2.0, 0.2
BOOT_S = 40.0
# Peak and trough as multiples of one instance's rate at C_scale_max: the surge then starts on
# two instances (peak / surge ratio needs 2), the peak needs 3, the trough 1.
PEAK_INSTANCES = 2.3
TROUGH_INSTANCES = 0.3
TIME_SCALE = 20.0
LOAD_TIMEOUT_S = 300
MAX_IN_FLIGHT = 200
# After the trace's last send: requests still streaming, and the load's own start and stop.
LOAD_SLACK_S = 600.0


def instance(queue_max_depth: int = 0) -> SerialStreamServer:
    return SerialStreamServer(**INSTANCE, faults=Faults(max_queue_depth=queue_max_depth))


def measure_qmax(workdir: Path, progress: Progress) -> QmaxArtifact:
    """The ladder against one instance without an admission gate (it would cap the ladder)."""
    from pytest_tts_scaling.endpoints.base import UrlEndpoint
    from pytest_tts_scaling.options import RunOptions
    from pytest_tts_scaling.steps.qmax import run_ladder
    from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs

    with instance() as server:
        options = RunOptions(
            endpoint_url=server.base_url,
            model=MODEL,
            slo_ms=SLO_MS,
            ladder=LADDER,
            hold_s=HOLD_S,
            measure_s=MEASURE_S,
            gap_s=GAP_S,
            artifacts_dir=workdir,
        )
        inputs = QmaxInputs.from_options(options)
        result = run_ladder(UrlEndpoint(server.base_url), inputs, progress=progress)
    for line in result.summary_lines():
        progress(line)
    return result.artifact


def emulated_ttotal(qmax: QmaxArtifact, boot_s: float = BOOT_S) -> TtotalArtifact:
    """The local fleet's T_total: its emulated boot plus the policy's detection-lag bound."""
    now = datetime.now(tz=UTC)
    stages = [
        Stage(stage="desired_set", at=iso(now), bounded=False, source="local fleet: decision"),
        Stage(
            stage="in_service",
            at=iso(now + timedelta(seconds=boot_s)),
            bounded=False,
            source=f"local fleet: emulated boot of {boot_s:g} s",
        ),
    ]
    return TtotalArtifact(
        model=qmax.model,
        slug=qmax.slug,
        transport=qmax.transport,
        trigger="emulated",
        weights=qmax.deployed_config.weights,
        t_measured_s=boot_s,
        policy_lag_bound_s=float(DEFAULT_POLICY_LAG_S),
        t_total_s=boot_s + DEFAULT_POLICY_LAG_S,
        bounded=True,
        stages=stages,
        provenance=Provenance(
            origin="local-fleet",
            run_id=uuid.uuid4().hex,
            measured_at=iso(now),
            tool_version=__version__,
        ),
        dominant_stage="in_service",
        policy_lag_source="assumed: 10 s period x 3 evaluation periods + 30 s scale-out cooldown",
    )


def rehearsal_plan(workdir: Path, progress: Progress) -> PlanOutcome:
    """Measure, emulate T_total, plan; the three artifacts are written into `workdir`."""
    qmax = measure_qmax(workdir, progress)
    ttotal = emulated_ttotal(qmax)
    save(ttotal, workdir / f"ttotal-{MODEL}-emulated-{qmax.slug}.json")
    # Sized from the measured curve: one instance's throughput at C_scale_max.
    probe = compute_plan(qmax, ttotal, PlanInputs(peak_rps=1.0))
    per_instance = probe.artifact.per_instance_rps_at_c_scale_max
    inputs = PlanInputs(
        peak_rps=round(PEAK_INSTANCES * per_instance, 3),
        trough_rps=round(TROUGH_INSTANCES * per_instance, 3),
    )
    outcome = compute_plan(qmax, ttotal, inputs)
    save(outcome.artifact, workdir / f"plan-{MODEL}.json")
    plan = outcome.artifact
    progress(
        f"validate_live: plan Q_max {qmax.q_max}, target {plan.c_scale_max:g} in flight per "
        f"instance ({per_instance:g} rps), {plan.min_instances}..{plan.max_instances} instances, "
        f"T_total {ttotal.t_total_s:g} s (verdict {plan.verdict})"
    )
    return outcome


@dataclass
class LiveRun:
    """What validate_live checks: the load's records, the fleet's log, the plan's prediction."""

    rows: list[dict[str, Any]]
    log: FleetLog
    traffic: LiveTraffic
    prediction: Prediction
    t0_ns: int
    slo_ms: float
    q_max: int
    load_output: str


def checks(run: LiveRun) -> dict[str, Check]:
    """Every validate_live check of one run by name, in the order both front doors show them."""
    first = live.check_first_new_instance(run.log.events, run.t0_ns, run.traffic)
    return {
        "steady_p95": live.check_steady_p95(run.rows, run.t0_ns, run.traffic, run.slo_ms),
        "rejections": live.check_rejections(run.log.dispatches, run.q_max),
        "first_new_instance": Check(
            first.ok, f"{first.detail}; {live.first_capacity_line(run.prediction)}"
        ),
        "surge_shed": live.check_surge_shed(run.rows, run.t0_ns, run.traffic, run.prediction),
        "surge_p95": live.check_surge_p95(run.rows, run.t0_ns, run.traffic, run.prediction),
        "scale_in": live.check_scale_in(run.log.events, run.traffic),
    }


def traffic_for(outcome: PlanOutcome, time_scale: float) -> LiveTraffic:
    plan = outcome.artifact
    # compute_plan always records both; a plan read from elsewhere is recomputed first.
    assert plan.surge_simulation is not None
    assert plan.t_total_s is not None
    surge: dict[str, Any] = plan.surge_simulation
    return live_traffic(
        policy=outcome.policy,
        per_instance_rps=plan.per_instance_rps_at_c_scale_max,
        base_rps=float(surge["start_rps"]),
        surge_ratio=float(surge["end_rps"]) / float(surge["start_rps"]),
        t_total_s=plan.t_total_s,
        initial_instances=outcome.surge_instances,
        trough_rps=plan.inputs.trough_rps or 0.0,
        time_scale=time_scale,
    )


def replay(
    outcome: PlanOutcome,
    workdir: Path,
    progress: Progress,
    *,
    time_scale: float = TIME_SCALE,
    processes: int = 0,
) -> LiveRun:
    """Run the validate_live traffic against a local fleet scaled by the plan."""
    plan = outcome.artifact
    traffic = traffic_for(outcome, time_scale)
    options = ["--max-in-flight", str(MAX_IN_FLIGHT)]
    if processes:
        options += ["--processes", str(processes)]
    with LocalFleet(
        traffic.policy,
        instance=lambda: instance(plan.queue_max_depth),
        initial=traffic.initial_instances,
    ) as fleet:
        rows, t0, output = load_trace(
            traffic,
            workdir,
            progress,
            [*options, "--endpoint-url", fleet.base_url],
            where=f"on {traffic.initial_instances} local instances",
            timeout_s=LOAD_TIMEOUT_S,
        )
    return live_run(outcome, traffic, fleet.log, rows, t0, output)


def load_trace(
    traffic: LiveTraffic,
    workdir: Path,
    progress: Progress,
    load_args: list[str],
    *,
    where: str,
    timeout_s: float,
) -> tuple[list[dict[str, Any]], int, str]:
    """Write the traffic as a trace of send times and replay it with `tts-bench load --trace`
    in its own process; the records, the wall-clock ns of the trace's zero, and the output."""
    times = arrivals.from_rates(traffic.rates, dt_s=traffic.dt_s, arrival="poisson", seed=1)
    trace, records = workdir / "live-trace.txt", workdir / "live.requests.jsonl"
    write_atomic(trace, arrivals.format_trace(times))
    k = traffic.time_scale
    pace = f"at 1/{k:g} of its time" if k != 1 else "in its own time"
    progress(
        f"validate_live: replaying {len(times)} sends over {traffic.duration_s:.0f} s (the plan's "
        f"story {pace}) {where}"
    )
    command = [sys.executable, "-m", "pytest_tts_scaling.cli", "load", "--trace", str(trace)]
    command += ["--records", str(records), *load_args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0 or not records.exists():
        raise RuntimeError(f"tts-bench load failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    t0 = min(int(r["due_epoch_ns"]) for r in rows) - round(float(times[0]) * 1e9)
    return rows, t0, done.stdout


def live_run(
    outcome: PlanOutcome,
    traffic: LiveTraffic,
    log: FleetLog,
    rows: list[dict[str, Any]],
    t0_ns: int,
    output: str,
) -> LiveRun:
    """What the checks read, with the plan's prediction of this very traffic."""
    slo_ms = outcome.surge.slo_ms
    return LiveRun(
        rows=rows,
        log=log,
        traffic=traffic,
        prediction=predict(traffic, outcome.curve, slo_ms),
        t0_ns=t0_ns,
        slo_ms=slo_ms,
        q_max=outcome.artifact.queue_max_depth,
        load_output=output,
    )


def run_validate_live(inputs: ValidateLiveInputs, progress: Progress) -> LiveRun:
    """The plan under live load: the rehearsal on a local fleet with no endpoint named, the
    deployed plan at its own pace with `--endpoint NAME`; refused (InputError) on a plain URL or
    an inference component. Artifacts go to ARTIFACTS_DIR/validate-live/."""
    target = inputs.target
    if target.kind == "url":
        raise InputError(
            "--endpoint-url: a plain URL has no scaling activity or per-instance "
            "in-flight to read; expected --endpoint NAME (a SageMaker endpoint with the plan "
            "deployed) or neither (the rehearsal on a local fleet)"
        )
    if target.kind == "sagemaker" and target.inference_component:
        raise InputError(
            f"{both_flags('--inference-component')}: validate_live reads a variant's instances, "
            "not an inference component's copies; expected --endpoint NAME alone"
        )
    workdir = target.artifacts_dir / "validate-live"
    workdir.mkdir(parents=True, exist_ok=True)
    if target.kind == "sagemaker":
        return deployed_run(inputs, workdir, progress)
    return replay(rehearsal_plan(workdir, progress), workdir, progress)


def deployed_run(inputs: ValidateLiveInputs, workdir: Path, progress: Progress) -> LiveRun:
    """The plan's traffic at its own pace against the SageMaker endpoint; what its fleet did is
    read from Application Auto Scaling, DescribeEndpoint and CloudWatch."""
    from pytest_tts_scaling.aws.clients import AwsClients
    from pytest_tts_scaling.load.host import usable_cores

    assert inputs.target.endpoint is not None
    load_args = ["--model", inputs.model, "--transport", inputs.transport]
    if inputs.scenario:
        load_args += ["--scenario", inputs.scenario]
    if (cores := len(usable_cores())) > 1:
        # A fleet's peak is more streams than one process keeps time for: one per core.
        load_args += ["--processes", str(cores)]
    outcome = deployed_plan(inputs, progress)
    return replay_deployed(
        outcome,
        workdir,
        progress,
        clients=AwsClients(),
        endpoint=inputs.target.endpoint,
        load_args=load_args,
    )


def deployed_plan(inputs: DeployedInputs, progress: Progress) -> PlanOutcome:
    """The plan behind the deployment: its curve and policy as it stored them (the traffic and
    the prediction need both); a schema 1 plan, which holds neither, from the artifacts it
    names."""
    from pytest_tts_scaling.artifacts import load
    from pytest_tts_scaling.core.schema import PlanArtifact
    from pytest_tts_scaling.report.plan import plan_outcome

    path = inputs.plan_path
    if not path.is_file():
        raise InputError(
            f"no plan at {path}: expected the deployed model's plan artifact (tts-bench plan "
            f"writes it to the artifacts directory; or {both_flags('--plan-artifact')} FILE)"
        )
    outcome, why = plan_outcome(load(path, PlanArtifact), path.parent)
    if outcome is None:
        raise InputError(f"{path}: {why}")
    if why:
        progress(f"validate_live: {why}")
    return outcome


def replay_deployed(
    outcome: PlanOutcome,
    workdir: Path,
    progress: Progress,
    *,
    clients: AwsClients,
    endpoint: str,
    load_args: Sequence[str] = (),
) -> LiveRun:
    """The validate_live traffic at the plan's own pace against the endpoint, by `tts-bench load
    --trace --endpoint`, while its instance counts are polled; then the fleet's log read back."""
    from pytest_tts_scaling.aws.checks.live import DeployedFleet, fleet_json
    from pytest_tts_scaling.aws.fingerprint import read_deployment

    deployment = read_deployment(clients.sagemaker, endpoint)
    traffic = traffic_for(outcome, 1.0)
    with DeployedFleet(clients, endpoint, deployment.variant) as fleet:
        serving = fleet.samples[0].current
        rows, t0, output = load_trace(
            traffic,
            workdir,
            progress,
            [*load_args, "--endpoint", endpoint],
            where=f"on {fleet.scope.describe()} ({serving} instances serving; the plan's surge "
            f"starts on {traffic.initial_instances})",
            timeout_s=traffic.duration_s + LOAD_SLACK_S,
        )
    log = fleet.log(rows, progress)
    write_atomic(workdir / "live.fleet.json", fleet_json(fleet, log))
    return live_run(outcome, traffic, log, rows, t0, output)
