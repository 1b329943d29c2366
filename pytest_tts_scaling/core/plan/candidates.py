"""Which instance type to buy: each measured instance type planned on its own (`compute_plan`),
costed over a day of the given traffic, and the cheapest that meets the SLO and the surge rule
chosen. Pure.

An instance type is a candidate when a qmax artifact and a ttotal artifact measured it; the two
are paired by slug (instance type and image). Its plan's verdict decides whether it qualifies:
a stop finding means it misses the SLO (slo_budget, invocation_ceiling, measurement_trust) or
cannot absorb the surge (surge_survival) or scale in safely. Among those that qualify the lowest
cost per day wins; its plan becomes the plan's own fields, so every reader of a single plan reads
the chosen one, and every candidate is kept beside it with why it lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tts_scaling.core.plan import PlanOutcome, compute_plan
from pytest_tts_scaling.core.plan.inputs import PlanInputs, label
from pytest_tts_scaling.core.plan.policy import simulate_day
from pytest_tts_scaling.core.plan.prices import PriceList, price_of
from pytest_tts_scaling.core.schema import (
    PlanCandidate,
    PlanPolicy,
    PlanPrices,
    QmaxArtifact,
    TtotalArtifact,
)
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import InputError, MismatchError


@dataclass(frozen=True)
class Measured:
    """One instance type's two measurements, with the file names they were read from."""

    qmax: QmaxArtifact
    ttotal: TtotalArtifact
    qmax_name: str | None = None
    ttotal_name: str | None = None


@dataclass(frozen=True)
class Priced:
    """Where the prices came from (the file's name) and what they are."""

    prices: PriceList
    name: str


Named = tuple[str | None, QmaxArtifact]
NamedTtotal = tuple[str | None, TtotalArtifact]


def pair_measurements(qmaxes: Sequence[Named], ttotals: Sequence[NamedTtotal]) -> list[Measured]:
    """Each qmax artifact with the ttotal artifact of its slug. One of each pair as they are
    (compute_plan judges a slug mismatch and its --allow-config-mismatch)."""
    if len(qmaxes) == 1 and len(ttotals) == 1:
        (q_name, q), (t_name, t) = qmaxes[0], ttotals[0]
        return [Measured(q, t, q_name, t_name)]
    by_slug: dict[str, NamedTtotal] = {}
    for t_name, t in ttotals:
        if t.slug in by_slug:
            raise MismatchError(
                f"{label(t_name, 'ttotal artifact')} and "
                f"{label(by_slug[t.slug][0], 'another ttotal artifact')} both measured slug "
                f"{t.slug!r}: expected one ttotal artifact per instance type and image"
            )
        by_slug[t.slug] = (t_name, t)
    paired: list[Measured] = []
    seen: dict[str, str | None] = {}
    for q_name, q in qmaxes:
        if q.slug in seen:
            raise MismatchError(
                f"{label(q_name, 'qmax artifact')} and {label(seen[q.slug], 'another')} both "
                f"measured slug {q.slug!r}: expected one qmax artifact per instance type and image"
            )
        seen[q.slug] = q_name
        if q.slug not in by_slug:
            raise MismatchError(
                f"{label(q_name, 'qmax artifact')} measured slug {q.slug!r} and no ttotal "
                f"artifact did: expected a {both_flags('--ttotal-artifact')} of the same instance "
                "type and image for each qmax artifact"
            )
        t_name, t = by_slug.pop(q.slug)
        paired.append(Measured(q, t, q_name, t_name))
    for t_name, t in by_slug.values():
        raise MismatchError(
            f"{label(t_name, 'ttotal artifact')} measured slug {t.slug!r} and no qmax artifact "
            f"did: expected a {both_flags('--qmax-artifact')} of the same instance type and image"
        )
    return paired


def plan_candidates(
    measured: Sequence[Measured], inputs: PlanInputs, priced: Priced | None
) -> PlanOutcome:
    """The plan of the cheapest qualifying candidate, every candidate beside it; without prices,
    the one candidate's plan as it is."""
    if not measured:
        raise InputError(f"plan needs at least one {both_flags('--qmax-artifact')} FILE")
    if len(measured) > 1 and priced is None:
        raise InputError(
            f"{len(measured)} instance types to weigh by cost: expected "
            f"{both_flags('--prices')} FILE with each one's price per instance hour"
        )
    _check_comparable(measured)
    outcomes = [
        compute_plan(
            m.qmax,
            m.ttotal,
            dataclasses.replace(inputs, qmax_name=m.qmax_name, ttotal_name=m.ttotal_name),
        )
        for m in measured
    ]
    if priced is None:
        return outcomes[0]
    costed = [
        candidate_cost(
            outcome, m, price_of(priced.prices, _instance_type(m), m.qmax.slug, priced.name), inputs
        )
        for outcome, m in zip(outcomes, measured, strict=True)
    ]
    chosen = choose(costed)
    return with_candidates(outcomes[chosen], judged(costed, chosen, priced.prices.currency), priced)


def with_candidates(
    outcome: PlanOutcome, candidates: list[PlanCandidate], priced: Priced
) -> PlanOutcome:
    """The chosen plan, its fields untouched, with the candidates and the prices beside them."""
    prices = priced.prices
    record = outcome.artifact.inputs.model_copy(
        update={
            "prices": PlanPrices(
                file=priced.name,
                currency=prices.currency,
                region=prices.region,
                as_of=prices.as_of,
                source=prices.source,
            )
        }
    )
    update = {"inputs": record, "candidates": candidates}
    return dataclasses.replace(outcome, artifact=outcome.artifact.model_copy(update=update))


def _instance_type(m: Measured) -> str:
    return m.qmax.deployed_config.instance_type


def _check_comparable(measured: Sequence[Measured]) -> None:
    """One plan is one model's, at one SLO, over one transport."""
    first = measured[0]
    name = label(first.qmax_name, "the first qmax artifact")
    for m in measured[1:]:
        other = label(m.qmax_name, "a qmax artifact")
        for field in ("model", "slo_ms", "transport"):
            mine, theirs = getattr(m.qmax, field), getattr(first.qmax, field)
            if mine != theirs:
                raise MismatchError(
                    f"{other}: field '{field}': {mine!r}, where {name} has {theirs!r}: expected "
                    "every candidate measured for the same model, SLO and transport"
                )


def audio_s_per_request(qmax: QmaxArtifact) -> float | None:
    """Mean seconds of audio in an answer over the usable rungs, weighted by completions; None
    where the ladder did not record the audio's length."""
    weighted = [
        (r.audio_s.mean, r.completed)
        for r in qmax.rungs
        if r.usable and r.completed and r.audio_s is not None and r.audio_s.mean
    ]
    total = sum(n for _, n in weighted)
    return sum(mean * n for mean, n in weighted) / total if total else None


def candidate_cost(
    outcome: PlanOutcome, m: Measured, price: float, inputs: PlanInputs
) -> PlanCandidate:
    """One candidate's fleet, policy and cost; not yet judged against the others."""
    plan = outcome.artifact
    day = simulate_day(
        outcome.curve, outcome.policy, inputs, m.qmax.slo_ms, plan.per_instance_rps_at_c_scale_max
    )
    per_day = day.instance_hours * price
    served = float(day.completed.sum())
    audio_s = audio_s_per_request(m.qmax)
    audio_hours = served * audio_s / 3600.0 if audio_s else 0.0
    # compute_plan names both artifacts in every plan it writes.
    assert plan.inputs.qmax_artifact is not None
    assert plan.inputs.ttotal_artifact is not None
    return PlanCandidate(
        instance_type=_instance_type(m),
        slug=m.qmax.slug,
        qmax_artifact=plan.inputs.qmax_artifact,
        ttotal_artifact=plan.inputs.ttotal_artifact,
        q_max=plan.queue_max_depth,
        per_instance_rps_at_c_scale_max=plan.per_instance_rps_at_c_scale_max,
        t_total_s=m.ttotal.t_total_s,
        min_instances=plan.min_instances,
        max_instances=plan.max_instances,
        policy=PlanPolicy(**dataclasses.asdict(outcome.policy)),
        verdict=plan.verdict,
        stops=[f.name for f in plan.findings if f.verdict == "stop"],
        price_per_hour=price,
        cost_per_hour_at_peak=round(plan.max_instances * price, 4),
        cost_per_hour_at_trough=round(plan.min_instances * price, 4),
        instance_hours_per_day=round(day.instance_hours, 3),
        cost_per_day=round(per_day, 4),
        requests_served_per_day=round(served, 1),
        shed_fraction_per_day=round(day.shed_fraction(), 6),
        audio_s_per_request=None if audio_s is None else round(audio_s, 3),
        cost_per_audio_hour=round(per_day / audio_hours, 6) if audio_hours > 0 else None,
        chosen=False,
        why="",
    )


def choose(costed: Sequence[PlanCandidate]) -> int:
    """The index of the cheapest per day among those whose plan does not stop (among all when
    none qualifies: the plan then stops); ties go to the smaller fleet at peak."""
    qualifying = [i for i, c in enumerate(costed) if not c.stops] or list(range(len(costed)))
    return min(
        qualifying,
        key=lambda i: (costed[i].cost_per_day, costed[i].max_instances, costed[i].slug),
    )


def judged(costed: Sequence[PlanCandidate], chosen: int, currency: str) -> list[PlanCandidate]:
    """Every candidate with whether it was chosen and why it won or lost."""
    best = costed[chosen]
    out = []
    for i, c in enumerate(costed):
        if len(costed) == 1:
            why = "chosen: the only instance type weighed" + (
                f"; its plan stops ({', '.join(c.stops)})" if c.stops else ""
            )
        elif i == chosen:
            why = (
                f"chosen: cheapest that meets the SLO and the surge rule, {currency} "
                f"{c.cost_per_day:.2f} a day"
                if not c.stops
                else "chosen, but no candidate meets the SLO and the surge rule: the cheapest "
                f"is shown and its plan stops ({', '.join(c.stops)})"
            )
        elif c.stops:
            why = f"lost: its plan stops ({_stops(c.stops)})"
        else:
            why = "lost: " + _dearer(c, best, currency)
        out.append(c.model_copy(update={"chosen": i == chosen, "why": why}))
    return out


# What a stop finding means for the choice: the rule the candidate misses.
_RULES = {
    "surge_survival": "the surge rule",
    "slo_budget": "the SLO",
    "invocation_ceiling": "the SLO",
    "scale_in_safety": "safe scale-in",
    "measurement_trust": "a measurement to trust",
}


def _stops(names: Sequence[str]) -> str:
    """`surge_survival: misses the surge rule, …`."""
    return ", ".join(f"{n}: misses {_RULES[n]}" if n in _RULES else n for n in names)


def _dearer(c: PlanCandidate, best: PlanCandidate, currency: str) -> str:
    """Why a qualifying candidate costs more than the chosen one: its price, or its fleet."""
    more = c.cost_per_day / best.cost_per_day - 1 if best.cost_per_day > 0 else 0.0
    text = (
        f"{currency} {c.cost_per_day:.2f} a day against {best.instance_type}'s "
        f"{best.cost_per_day:.2f} ({more:+.0%})"
    )
    fleets = f"{c.max_instances} instances at peak against {best.max_instances}"
    if c.price_per_hour < best.price_per_hour:
        return (
            f"{text}: cheaper per instance hour ({c.price_per_hour:g} against "
            f"{best.price_per_hour:g}) but the fleet is larger: {fleets}"
        )
    return (
        f"{text}: {c.price_per_hour:g} against {best.price_per_hour:g} per instance hour, {fleets}"
    )
