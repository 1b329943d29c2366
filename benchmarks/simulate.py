"""How long the fleet simulator takes for a day of traffic, and what it finds.

    .venv/bin/python benchmarks/simulate.py [--peak-rps 5000] [--trough-rps 10] [--repeat 3]

A 24-hour diurnal trace (cosine from the trough at midnight to the peak at noon, one-second steps)
through the fleet that `tts-bench plan` derives from the committed worked-example artifacts
(reports/examples/source/): measured throughput curve, planned thresholds, cooldowns and T_total.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pytest_tts_scaling.artifacts import load
from pytest_tts_scaling.core.plan import PlanInputs, compute_plan
from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact
from pytest_tts_scaling.core.simulate import diurnal_trace, simulate

DATA = Path(__file__).resolve().parents[1] / "reports" / "examples" / "source"
QMAX = DATA / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
TTOTAL = DATA / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak-rps", type=float, default=5000.0)
    parser.add_argument("--trough-rps", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    qmax = load(QMAX, QmaxArtifact)
    ttotal = load(TTOTAL, TtotalArtifact)
    outcome = compute_plan(
        qmax, ttotal, PlanInputs(peak_rps=args.peak_rps, trough_rps=args.trough_rps)
    )
    plan = outcome.artifact
    policy = outcome.policy
    trace = diurnal_trace(args.peak_rps, args.trough_rps, hours=24.0, dt_s=1.0)
    timings = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        run = simulate(trace, curve=outcome.curve, policy=policy, slo_ms=qmax.slo_ms)
        timings.append(time.perf_counter() - started)
    outs = sum(1 for e in run.events if e.direction == "out")
    ins = sum(1 for e in run.events if e.direction == "in")
    print(
        f"trace: 24 h diurnal, {args.trough_rps:g}..{args.peak_rps:g} rps, {trace.size} "
        f"one-second steps, {run.total_arrived / 1e6:.1f} M requests"
    )
    print(
        f"fleet: {plan.min_instances}..{plan.max_instances} instances, target "
        f"{plan.c_scale_max:g}, scale-in {plan.c_scale_min:g}, cooldowns "
        f"{plan.scale_out_cooldown_s}/{plan.scale_in_cooldown_s} s, "
        f"provisioning {policy.provision_s:g} s, queue_max_depth {plan.queue_max_depth}"
    )
    print(
        f"simulated in {min(timings):.3f} s (best of {args.repeat}; all: "
        f"{', '.join(f'{t:.3f}' for t in timings)})"
    )
    print(
        f"shed: {run.total_shed:.0f} requests ({run.shed_fraction():.3%}); p95 TTFAB worst "
        f"{run.worst_ttfab_p95_ms:.0f} ms, above the {qmax.slo_ms:g} ms SLO for "
        f"{run.slo_violation_s:g} s ({run.admitted_over_slo:.0f} requests admitted then)"
    )
    print(
        f"instances: {int(run.serving.min())}..{int(run.serving.max())} serving; "
        f"{outs} scale-outs, {ins} scale-ins; {run.instance_hours:.0f} instance-hours"
    )


if __name__ == "__main__":
    main()
