"""The findings about the measurement itself: trust, repeatability, configuration, the SLO budget,
SageMaker's invocation ceiling and the queue bound; and the facts every finding reads. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_tts_scaling.core.autoscaler import Policy
from pytest_tts_scaling.core.curve import ServiceCurve
from pytest_tts_scaling.core.plan.inputs import INVOCATION_LIMIT_S, REPEAT_SPREAD, PlanInputs
from pytest_tts_scaling.core.schema import Finding, QmaxArtifact, TtotalArtifact, Verdict
from pytest_tts_scaling.core.simulate import SimulationResult
from pytest_tts_scaling.core.spelling import both_flags


@dataclass(frozen=True)
class Facts:
    qmax: QmaxArtifact
    ttotal: TtotalArtifact
    inputs: PlanInputs
    curve: ServiceCurve
    h: float
    c_max: float
    c_min: float
    ratio: float
    ratio_rung: int | None
    w_max: float
    measured_x: float
    little_x: float
    per_instance: float
    min_instances: int
    max_instances: int
    min_safe: int
    policy: Policy
    surge_run: SimulationResult
    surge_n: int
    base_rps: float

    @property
    def q_max(self) -> int:
        assert self.qmax.q_max is not None
        return self.qmax.q_max

    @property
    def s_p95(self) -> float:
        assert self.qmax.s_p95_s is not None
        return self.qmax.s_p95_s


def make_finding(name: str, verdict: Verdict, detail: str, recommendation: str) -> Finding:
    return Finding(name=name, verdict=verdict, detail=detail, recommendation=recommendation)


def measurement_trust(f: Facts) -> Finding:
    q = f.qmax
    rungs = sorted(q.rungs, key=lambda r: r.concurrency)
    usable = [r for r in rungs if r.usable]
    unusable = [
        f"{r.concurrency} ({r.unusable_reason or 'unusable'})" for r in rungs if not r.usable
    ]
    at_qmax = [r for r in usable if r.concurrency == f.q_max and r.meets_slo]
    facts = (
        f"Q_max {f.q_max} is {'bracketed' if q.q_max_bracketed else 'a lower bound'}; "
        f"{len(usable)} of {len(rungs)} rungs usable"
        + (f" (unusable: {', '.join(unusable)})" if unusable else "")
        + f"; capacity {'frozen' if q.frozen else 'NOT frozen'}; admission queue "
        f"{'unbounded' if q.unbounded_queue else 'bounded'} while measuring; run "
        f"{'complete' if q.complete else 'incomplete (' + (q.stop_reason or 'interrupted') + ')'}"
    )
    if not at_qmax or len(usable) < 2:
        return make_finding(
            "measurement_trust",
            "stop",
            facts + ": Q_max does not rest on a usable passing rung and a curve of at least two "
            "usable rungs.",
            "re-run tts-bench qmax until the Q_max rung and its neighbours are usable",
        )
    failing_below = [r.concurrency for r in usable if r.concurrency < f.q_max and not r.meets_slo]
    problems = []
    if not q.q_max_bracketed:
        problems.append("no higher rung failed, so the true Q_max may be higher")
    if not q.frozen:
        problems.append("autoscaling was not frozen, so more than one instance may have served")
    if not q.complete:
        problems.append("the ladder did not finish")
    if unusable:
        problems.append("some rungs could not be judged")
    if failing_below:
        problems.append(f"rungs {failing_below} below Q_max failed the SLO (noisy measurement)")
    if problems:
        return make_finding(
            "measurement_trust",
            "warn",
            facts + ": " + "; ".join(problems) + ".",
            "re-run tts-bench qmax frozen, with a ladder that reaches a failing rung",
        )
    return make_finding(
        "measurement_trust", "ok", facts + ".", "none: the ladder can be trusted as measured"
    )


def repeatability(f: Facts) -> Finding:
    runs = [r for r in f.qmax.runs_q_max if r is not None]
    if len(f.qmax.runs_q_max) < 2:
        return make_finding(
            "repeatability",
            "warn",
            f"Q_max {f.q_max} comes from one ladder: one run gives no spread, so how much Q_max "
            "moves between runs is unknown.",
            "re-run tts-bench qmax with --runs 3; the plan then uses the lowest Q_max",
        )
    missing = len(f.qmax.runs_q_max) - len(runs)
    low, high = (min(runs), max(runs)) if runs else (0, 0)
    detail = (
        f"Q_max across {len(f.qmax.runs_q_max)} runs: {f.qmax.runs_q_max} (spread {high - low}); "
        f"the plan uses {f.q_max}."
    )
    if missing or (high - low) > REPEAT_SPREAD * f.q_max or f.q_max > low:
        return make_finding(
            "repeatability",
            "warn",
            detail + f" Runs disagree by more than {REPEAT_SPREAD:.0%} of Q_max, found none, or "
            "the plan's Q_max is above the lowest run.",
            "find what varies between runs (other tenants, thermal state, payload mix) and "
            "plan from the lowest Q_max",
        )
    return make_finding("repeatability", "ok", detail, "none")


def config_match(f: Facts) -> Finding | None:
    if f.qmax.slug == f.ttotal.slug:
        return None
    return make_finding(
        "config_match",
        "warn",
        f"qmax was measured on {f.qmax.slug!r} and ttotal on {f.ttotal.slug!r} "
        f"(accepted by {both_flags('--allow-config-mismatch')}): T_total may not be this "
        "configuration's.",
        "re-measure ttotal on the configuration qmax measured before deploying",
    )


def slo_budget(f: Facts) -> Finding:
    slo_s = f.qmax.slo_ms / 1000.0
    ceiling = f.curve.ceiling_rps
    detail = (
        f"W_max = SLO - S_p95 = {slo_s:.3f} - {f.s_p95:.3f} = {f.w_max:.3f} s of queueing budget "
        f"per request; at the measured ceiling of {ceiling:.2f} completions/s an instance drains "
        f"{f.w_max * ceiling:.1f} requests within it (Q_max {f.q_max})."
    )
    if f.w_max <= 0:
        return make_finding(
            "slo_budget",
            "stop",
            detail + " The service time alone uses the whole SLO.",
            "raise the SLO or make one request faster before planning a fleet",
        )
    if f.w_max < f.s_p95:
        return make_finding(
            "slo_budget",
            "warn",
            detail + " Less than one service time is left for queueing: any burst breaks the SLO.",
            "raise the SLO or cut the service time",
        )
    return make_finding("slo_budget", "ok", detail, "none")


def invocation_ceiling(f: Facts) -> Finding:
    slo_s = f.qmax.slo_ms / 1000.0
    at_qmax = [r for r in f.qmax.rungs if r.concurrency == f.q_max and r.usable]
    latency_p95_s = (at_qmax[0].latency_ms.p95 or 0.0) / 1000.0 if at_qmax else 0.0
    detail = (
        f"SLO + S_p95 = {slo_s:.3f} + {f.s_p95:.3f} = {slo_s + f.s_p95:.3f} s and p95 latency to "
        f"the last byte at Q_max {latency_p95_s:.3f} s, against SageMaker's "
        f"{INVOCATION_LIMIT_S:g} s invocation limit."
    )
    if slo_s + f.s_p95 > INVOCATION_LIMIT_S or latency_p95_s > INVOCATION_LIMIT_S:
        return make_finding(
            "invocation_ceiling",
            "stop",
            detail + " Requests at Q_max would be cut off by the platform.",
            "lower the SLO, or split long texts so one invocation ends within 60 s",
        )
    if latency_p95_s > 0.8 * INVOCATION_LIMIT_S:
        return make_finding(
            "invocation_ceiling",
            "warn",
            detail + " Within 20% of the limit: longer texts will be cut off.",
            "cap the text length per request",
        )
    return make_finding("invocation_ceiling", "ok", detail, "none")


def _queue_bound_measured(q: QmaxArtifact) -> int | None:
    raw = q.deployed_config.container_env.get("QUEUE_MAX_DEPTH", "")
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value > 0 and not q.unbounded_queue else None


def queue_depth(f: Facts) -> Finding:
    bound = _queue_bound_measured(f.qmax)
    top = max(r.concurrency for r in f.qmax.rungs)
    detail = (
        f"queue_max_depth = Q_max = {f.q_max}: the container's gate answers 503 queue_saturated "
        f"beyond {f.q_max} requests in flight per instance, so no admitted request waits past "
        f"the SLO; measured with "
        + (f"QUEUE_MAX_DEPTH={bound}" if bound is not None else "no admission bound")
        + "."
    )
    if bound is not None and bound < top:
        return make_finding(
            "queue_depth",
            "warn",
            detail + f" That bound is below the top rung {top}: rungs above it were shaped by "
            "the gate, not by latency.",
            "re-measure qmax with QUEUE_MAX_DEPTH unset or above the top rung",
        )
    return make_finding(
        "queue_depth",
        "ok",
        detail,
        f"deploy QUEUE_MAX_DEPTH={f.q_max} (the config block's queue_max_depth)",
    )
