"""The findings about the policy: threshold units, the knee, surge survival (simulated), scale-in
safety, fleet cost and the dominant provisioning stage. Pure.
"""

from __future__ import annotations

import math

from pytest_tts_scaling.core.autoscaler import Policy
from pytest_tts_scaling.core.curve import ServiceCurve
from pytest_tts_scaling.core.plan.findings import Facts, make_finding
from pytest_tts_scaling.core.plan.inputs import (
    ALARM_PERIOD_S,
    COLLAPSE_SHARE,
    KNEE_SHARE,
    LITTLE_TOLERANCE,
    RATIO_SPREAD,
    SURGE_LEAD_S,
    PlanInputs,
    day_traffic,
)
from pytest_tts_scaling.core.plan.quantities import fleet_size, knee_concurrency, stage_durations
from pytest_tts_scaling.core.schema import Finding
from pytest_tts_scaling.core.simulate import SimulationResult, simulate
from pytest_tts_scaling.core.spelling import both_flags


def threshold_units(f: Facts) -> Finding:
    ratios = [r.cw_ratio for r in f.qmax.rungs if r.usable and r.cw_ratio]
    sagemaker = f.qmax.deployed_config.instance_type.startswith("ml.")
    if f.ratio_rung is None:
        detail = (
            "no CloudWatch/client ratio in the qmax artifact: scaling_target_value and "
            "scale_in_threshold are in client units (mean in-flight per instance, ratio taken "
            "as 1.0)."
        )
        if sagemaker:
            return make_finding(
                "threshold_units",
                "warn",
                detail + " ConcurrentRequestsPerModel reports a 10-s Maximum, which can read "
                "higher than the client's mean: the policy may scale out early.",
                "re-run tts-bench qmax against the SageMaker endpoint so the ratio is joined "
                "per rung",
            )
        return make_finding(
            "threshold_units",
            "ok",
            detail + " This endpoint has no CloudWatch metric, so client units are its units.",
            "measure on SageMaker before deploying there",
        )
    detail = (
        f"CloudWatch/client ratio {f.ratio:g} at rung {f.ratio_rung} (nearest C_scale_max "
        f"{f.c_max:g}): target {f.c_max:g} x {f.ratio:g}, scale-in {f.c_min:g} x {f.ratio:g} "
        "in CloudWatch units."
    )
    low, high = min(ratios), max(ratios)
    if high > (1 + RATIO_SPREAD) * low:
        return make_finding(
            "threshold_units",
            "warn",
            detail + f" Ratios across rungs range {low:g}..{high:g}: the conversion depends on "
            "load.",
            "check the CloudWatch join per rung; re-measure if the metric lagged",
        )
    return make_finding("threshold_units", "ok", detail, "none")


def knee_finding(f: Facts) -> Finding:
    curve = f.curve
    knee = knee_concurrency(curve)
    top = curve.ceiling_rps
    x_knee = curve.throughput(knee)
    x_max = f.measured_x
    x_min = curve.throughput(f.c_min)
    detail = (
        f"throughput stops growing at concurrency {knee:g} ({x_knee:.2f} completions/s, "
        f"{x_knee / top:.0%} of the {top:.2f} ceiling); at C_scale_max {f.c_max:g} an instance "
        f"completes {x_max:.2f}/s ({x_max / top:.1%}) and at C_scale_min {f.c_min:g} "
        f"{x_min:.2f}/s."
    )
    cs, xs = curve.concurrency, curve.throughput_rps
    admitted = [x for c, x in zip(cs, xs, strict=True) if knee <= c <= f.q_max]
    if len(cs) > 1 and knee == cs[-1] and xs[-1] > (1 + (1 - KNEE_SHARE)) * xs[-2]:
        return make_finding(
            "knee",
            "warn",
            detail + " Throughput was still growing at the top rung: no knee was measured and "
            "the simulation holds throughput flat beyond it.",
            "extend the ladder until throughput stops growing",
        )
    if admitted and min(admitted) < COLLAPSE_SHARE * top:
        return make_finding(
            "knee",
            "warn",
            detail + f" Throughput falls to {min(admitted):.2f}/s past the knee within Q_max: "
            "more concurrency costs completions.",
            "lower QUEUE_MAX_DEPTH toward the knee, or find what degrades under load",
        )
    if knee < f.c_min:
        return make_finding(
            "knee",
            "warn",
            detail + " Both thresholds lie past the knee, where more requests in flight only "
            "queue: concurrency there measures backlog, not load, so the policy scales out only "
            "once instances are saturated, and the two thresholds are "
            f"{(x_max / x_min - 1):.1%} of load apart, not the {f.c_max / f.c_min - 1:.0%} the "
            "surge ratio intends.",
            "expect scale-out at saturation (see surge_survival); to scale earlier, scale on "
            f"invocations per instance near {x_knee:.1f}/s or serve more requests in parallel",
        )
    return make_finding("knee", "ok", detail, "none")


def surge_record(f: Facts) -> dict[str, object]:
    run = f.surge_run
    start = SURGE_LEAD_S
    first_ready = min((e.ready_at_s for e in run.events if e.direction == "out"), default=None)
    last_shed = run.last_shed_s()
    return {
        "simulation": "fluid",
        "start_rps": round(f.base_rps, 3),
        "end_rps": round(f.base_rps * (1 + f.h), 3),
        "ramp_s": f.ttotal.t_total_s,
        "start_instances": f.surge_n,
        "end_instances": int(run.serving[-1]),
        "first_capacity_s": None if first_ready is None else round(first_ready - start, 1),
        "worst_ttfab_p95_ms": round(run.worst_ttfab_p95_ms, 1),
        "shed_fraction": round(run.shed_fraction(start, None), 6),
        "shed_requests": round(float(run.shed[run.time_s >= start].sum()), 1),
        "last_shed_s": None if last_shed is None else round(last_shed - start, 1),
        "peak_concurrency": round(float(run.concurrency.max()), 3),
    }


def surge_survival(f: Facts) -> Finding:
    run = f.surge_run
    rec = surge_record(f)
    t_total = f.ttotal.t_total_s
    end = float(run.time_s[-1]) + run.dt_s
    shed = run.shed_fraction(SURGE_LEAD_S, None)
    last_shed = run.last_shed_s()
    recovered = last_shed is None or last_shed < end - t_total
    first = rec["first_capacity_s"]
    utilization = f.measured_x / f.curve.ceiling_rps
    detail = (
        f"simulated {f.surge_n} instances at {rec['start_rps']:g} rps rising x{1 + f.h:g} to "
        f"{rec['end_rps']:g} rps over T_total {t_total:g} s (fluid model, policy as planned, "
        f"new instances serving {f.policy.provision_s:g} s after each decision): "
        + (
            f"first new capacity {first:g} s into the surge; "
            if first is not None
            else "no scale-out was needed; "
        )
        + f"worst p95 TTFAB {rec['worst_ttfab_p95_ms']:g} ms (SLO {f.qmax.slo_ms:g}); the gate "
        f"shed {shed:.1%} of requests ({rec['shed_requests']:g}) over the surge and the "
        f"{2 * t_total:g} s after it; instances at the scale-out threshold already run at "
        f"{utilization:.1%} of their measured throughput ceiling."
    )
    if run.worst_ttfab_p95_ms > f.qmax.slo_ms or not recovered:
        why = []
        if run.worst_ttfab_p95_ms > f.qmax.slo_ms:
            why.append("admitted requests missed the SLO")
        if not recovered:
            why.append(
                f"the fleet was still shedding in the last {t_total:g} s: at max_instances "
                f"{f.max_instances} it cannot carry the peak"
            )
        return make_finding(
            "surge_survival",
            "stop",
            detail + " " + "; ".join(why).capitalize() + ".",
            "shorten T_total (see provision_stage), pick a larger surge ratio, or raise the "
            "floor ahead of known surges",
        )
    if shed > 0:
        return make_finding(
            "surge_survival",
            "warn",
            detail + " The fleet survives only by refusing requests until new capacity serves.",
            "accept the 503s (clients retry), or keep throughput headroom: raise min capacity "
            "ahead of known surges, shorten T_total, or scale on a signal that moves before "
            "saturation (see knee)",
        )
    return make_finding("surge_survival", "ok", detail, "none")


def scale_in_safety(f: Facts) -> Finding:
    if f.c_max <= f.c_min:
        return make_finding(
            "scale_in_safety",
            "stop",
            f"surge ratio {1 + f.h:g} puts the scale-in threshold ({f.c_min:g}) at the "
            f"scale-out threshold ({f.c_max:g}): every scale-in is followed by a scale-out.",
            "pick a surge ratio above 1",
        )
    ratio = f.c_max / f.c_min
    x_max, x_min = f.curve.throughput(f.c_max), f.curve.throughput(f.c_min)
    load = (
        f"; in load terms (measured {x_min:.2f} and {x_max:.2f} completions/s at the thresholds) "
        + (
            f"it needs N >= {math.ceil(x_max / (x_max - x_min) - 1e-9)}, since past the knee "
            "concurrency is not proportional to load"
            if x_max > x_min
            else "no fleet size is safe, since both thresholds sit at the same throughput"
        )
    )
    detail = (
        f"removing one of N instances multiplies each survivor's load by N/(N-1); scale-in "
        f"stays below the scale-out threshold only while N/(N-1) <= C_scale_max/C_scale_min = "
        f"{ratio:g}, i.e. N >= {f.min_safe}" + load + f". min_instances is {f.min_instances}."
    )
    if f.min_instances < f.min_safe:
        return make_finding(
            "scale_in_safety",
            "warn",
            detail + f" Below {f.min_safe} instances a scale-in can push the survivors back "
            "over the scale-out threshold (2 -> 1 doubles the survivor's load); the "
            f"{f.policy.scale_in_cooldown_s:g} s cooldown damps that oscillation but cannot "
            "remove it.",
            f"raise {both_flags('--min-floor')} to {f.min_safe} if quiet-hour capacity is "
            "affordable",
        )
    return make_finding("scale_in_safety", "ok", detail, "none")


def simulate_day(
    curve: ServiceCurve, policy: Policy, inputs: PlanInputs, slo_ms: float, per_instance: float
) -> SimulationResult:
    """The fleet through a day of the given traffic (:func:`day_traffic`), starting with the
    instances its first rate needs."""
    traffic = day_traffic(inputs)
    start = fleet_size(float(traffic[0]), per_instance)
    return simulate(
        traffic,
        curve=curve,
        policy=policy,
        slo_ms=slo_ms,
        dt_s=ALARM_PERIOD_S,
        initial_instances=min(policy.max_instances, max(policy.min_instances, start)),
    )


def fleet_cost(f: Facts) -> Finding:
    inputs = f.inputs
    assert inputs.peak_rps is not None
    s_mean = f.qmax.s_mean_s
    naive = math.ceil(inputs.peak_rps * s_mean / f.c_max - 1e-9) if s_mean else None
    day = simulate_day(f.curve, f.policy, inputs, f.qmax.slo_ms, f.per_instance)
    detail = (
        f"an instance completes {f.measured_x:.3f} requests/s at C_scale_max {f.c_max:g} "
        f"(Little's law N / mean latency: {f.little_x:.3f}/s; sized with {f.per_instance:g}); "
        f"trough {inputs.trough_rps:g} rps needs {fleet_size(inputs.trough_rps, f.per_instance)}, "
        f"peak {inputs.peak_rps:g} rps needs {fleet_size(inputs.peak_rps, f.per_instance)}; fleet "
        f"{f.min_instances}..{f.max_instances} (floor {inputs.min_floor}); a simulated day "
        f"{'of the hourly profile' if inputs.hourly_rps else 'between trough and peak'} costs "
        f"{day.instance_hours:.0f} instance-hours."
    )
    if naive is not None and s_mean:
        short = (
            f", {f.max_instances / max(naive, 1):.0f}x too few" if naive < f.max_instances else ""
        )
        detail += (
            f" rps x S_mean / C_scale_max would give {naive} instance(s){short}: it assumes an "
            f"instance completes C_scale_max / S_mean = {f.c_max / s_mean:.0f}/s, where it "
            f"completes {f.per_instance:g}/s."
        )
    gap = abs(f.measured_x - f.little_x) / max(f.measured_x, f.little_x)
    if gap > LITTLE_TOLERANCE:
        return make_finding(
            "fleet_cost",
            "warn",
            detail + f" Measured throughput and Little's law disagree by {gap:.0%}: the ladder's "
            "windows or in-flight counts are suspect; the lower value sizes the fleet.",
            "re-measure qmax and check the rung windows",
        )
    if f.max_instances <= f.min_instances:
        return make_finding(
            "fleet_cost",
            "warn",
            detail + " min_instances equals max_instances: there is nothing to scale, and the "
            "infra will leave autoscaling out.",
            f"lower {both_flags('--min-floor')} or check {both_flags('--peak-rps')}",
        )
    return make_finding(
        "fleet_cost",
        "ok",
        detail,
        "request a service quota of at least max_instances for the instance type",
    )


def provision_stage(f: Facts) -> Finding:
    t = f.ttotal
    durations = stage_durations(t)
    if not durations:
        return make_finding(
            "provision_stage",
            "warn",
            f"T_total {t.t_total_s:g} s has no stage timeline: what dominates it is unknown.",
            "re-run tts-bench ttotal so each stage is timed",
        )
    by_name = dict(durations)
    longest = max(durations, key=lambda d: d[1])[0]
    name = t.dominant_stage if t.dominant_stage in by_name else longest
    seconds = by_name[name]
    share = seconds / t.t_total_s
    after = sum(d for n, d in durations[[n for n, _ in durations].index(name) + 1 :])
    return make_finding(
        "provision_stage",
        "ok",
        f"{name} dominates T_total: {seconds:.1f} s of {t.t_total_s:g} s ({share:.0%}); the "
        f"stages after it take {after:.1f} s; {t.policy_lag_bound_s:g} s of T_total is the "
        f"policy's detection-lag bound, not measured.",
        "a smaller image or warm capacity (warm pools) shortens T_total"
        if name in ("instance_logging", "desired_set", "in_service")
        else f"shorten {name} to shorten T_total",
    )
