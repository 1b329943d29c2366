"""Regression check of a qmax artifact against a baseline. Pure: artifacts in, verdicts out.

What a check answers (one :class:`Check` per compared value, the :class:`Comparison` of them
and the lines ``tts-bench compare`` prints and the report shows), the rule, and the matching of
rungs, in one place.

Two artifacts are compared only when they describe the same thing: the same model, transport,
fingerprint (slug) and SLO. Otherwise :class:`MismatchError` names the field, unless the caller
accepts the mismatch (``--allow-config-mismatch``), which turns it into a warning. Both must hold
their SLO on the same clock (``slo_metric``: TTFAB, first audible speech or glitch-free
playback), which nothing overrides: the p95 below is compared on that clock.

The rule
--------
**Q_max** regresses when it drops below the baseline's, or when the new ladder found none where
the baseline did. There is no allowance: the ladder already holds a rung whose p95 confidence
interval contains the SLO for extra windows, so a rung's pass/fail is as settled as the run can
make it, and a Q_max one request lower means the instance holds less. When the deciding rung was
still inconclusive the check says so, but it fails all the same.

**p95 TTFAB** is compared at every concurrency both artifacts measured with a usable rung. A
rise counts only when it exceeds the noise of the two measurements:

1. Each p95 carries a confidence interval (``ttfab_p95_ci_ms``, order statistics, level 95%).
   Its half-width divided by the normal quantile of its level is a standard error. Only the side
   that matters is used: the baseline's upper half (it could really be higher) and the new
   run's lower half (it could really be lower); the order-statistic interval is asymmetric.
   An artifact without an interval gets the asymptotic standard error of a sample quantile,
   ``sqrt(q(1-q)/n) / f``, with the density ``f`` at p95 read from the p90-p99 spread.
2. The two runs are independent, so the noise of the difference is
   ``z * sqrt(se_baseline² + se_new²)``. ``z`` is one-sided with a Bonferroni correction over
   the k rungs compared, ``z = Φ⁻¹(1 - 0.05/k)``: with no real change, the chance that *any*
   rung of the ladder is flagged stays at or below 5%. A plain 95% test at each of 8 rungs
   would flag about one nightly run in three.
3. The within-run interval knows nothing of what moves between runs (another host, the time of
   day, a warmer cache, a loaded client machine), and it shrinks towards nothing on a very
   steady server. A rise must therefore also exceed a practical floor: ``max(5% of the baseline
   p95, 5 ms)``; 5 ms is about what an asyncio client on a shared machine resolves reliably.

``threshold = baseline_p95 + tolerance * max(noise, floor)``, and the new p95 regresses when it
is above the threshold. ``--regression-tolerance`` (default 1.0) scales the allowance: 0 fails
on any rise, 2 allows twice the noise (a sensible setting on shared CI runners or with short
measure windows, where between-run drift exceeds the within-run intervals). A fall beyond the
same allowance, taken on the other sides of the two intervals, is reported as improved
(informational: refresh the baseline).

Rungs that either run judged unusable, or that only one of them measured, are listed as
skipped: their effect on capacity is what the Q_max check is for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

from pytest_tts_scaling.core.schema import CLOCK_WORDS, QmaxArtifact, Rung
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import ArtifactError, InputError, MismatchError

CheckStatus = Literal["ok", "improved", "regressed", "skipped"]
STATUS_LABEL: dict[str, str] = {
    "ok": "ok",
    "improved": "improved",
    "regressed": "REGRESSION",
    "skipped": "skipped",
}


@dataclass(frozen=True)
class Check:
    """One comparison: a value of the baseline, the new value and the bound it was held to."""

    name: str
    status: CheckStatus
    baseline: float | None
    new: float | None
    threshold: float | None
    detail: str
    concurrency: int | None = None
    unit: str = ""
    # How the new value must stand to the threshold: Q_max at or above, a latency at or below.
    relation: Literal[">=", "<="] = "<="

    @property
    def failed(self) -> bool:
        return self.status == "regressed"

    def line(self) -> str:
        label = STATUS_LABEL[self.status]
        if self.status == "skipped":
            return f"{label} {self.name}: {self.detail}"
        bound = (
            "threshold n/a"
            if self.threshold is None
            else f"threshold {self.relation} {self._value(self.threshold)}"
        )
        return (
            f"{label} {self.name}: baseline {self._value(self.baseline)}, "
            f"new {self._value(self.new)}, {bound} ({self.detail})"
        )

    def _value(self, value: float | None) -> str:
        if value is None:
            return "none"
        return f"{value:.1f} {self.unit}".strip() if self.unit else f"{value:g}"


@dataclass(frozen=True)
class Comparison:
    """Every check of one artifact against its baseline; it fails when any check regressed."""

    baseline_name: str
    new_name: str
    tolerance: float
    checks: tuple[Check, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # The one-sided z of the p95 TTFAB checks, and their threshold rule in words with its numbers
    # (both None when no rung was compared).
    z: float | None = None
    rule: str | None = None

    @property
    def regressions(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.failed)

    @property
    def ok(self) -> bool:
        return not self.regressions

    def verdict_line(self) -> str:
        compared = [c for c in self.checks if c.status != "skipped"]
        if self.ok:
            return (
                f"compare: no regression: {len(compared)} check(s) of {self.new_name} against "
                f"{self.baseline_name} (tolerance {self.tolerance:g})"
            )
        names = ", ".join(c.name for c in self.regressions)
        return (
            f"compare: REGRESSION in {len(self.regressions)} of {len(compared)} check(s) "
            f"({names}); to accept, commit {self.new_name} as the new baseline, or re-run with "
            f"a larger {both_flags('--regression-tolerance')} (now {self.tolerance:g})"
        )

    def lines(self) -> list[str]:
        return [
            *(f"compare: warning: {w}" for w in self.warnings),
            *([f"compare: {self.rule}"] if self.rule else []),
            *(c.line() for c in self.checks),
            self.verdict_line(),
        ]


DEFAULT_TOLERANCE = 1.0
# Chance that a ladder with no real change is flagged at any rung (Bonferroni over rungs).
FAMILY_ALPHA = 0.05
# A rise must exceed this share of the baseline p95 and this many ms, whatever the intervals say.
MIN_RISE_FRACTION = 0.05
MIN_RISE_MS = 5.0
# The quantile the intervals are for (p95).
QUANTILE = 0.95
# The fields that must agree for two artifacts to be compared.
IDENTITY_FIELDS = ("model", "transport", "slug", "slo_ms")


def check_identity(
    baseline: QmaxArtifact,
    *,
    model: str | None = None,
    transport: str | None = None,
    slug: str | None = None,
    slo_ms: float | None = None,
    allow_mismatch: bool = False,
    baseline_name: str = "baseline",
    new_name: str = "new run",
) -> list[str]:
    """Refuse (or, when allowed, warn about) a baseline of another configuration.

    Fields given as None are not checked yet (the slug is known only once the endpoint is open).
    Returns the warnings for accepted mismatches.
    """
    given = {"model": model, "transport": transport, "slug": slug, "slo_ms": slo_ms}
    warnings: list[str] = []
    for name in IDENTITY_FIELDS:
        new_value = given[name]
        old_value = getattr(baseline, name)
        if new_value is None or new_value == old_value:
            continue
        what = (
            f"field '{name}': {baseline_name} has {_show(old_value)}, {new_name} has "
            f"{_show(new_value)}"
        )
        if not allow_mismatch:
            raise MismatchError(
                f"{what}: expected the same {name} (the comparison is only meaningful on the "
                "same configuration, docs/artifacts.md#files); use a baseline measured on it, or "
                f"pass {both_flags('--allow-config-mismatch')}"
            )
        warnings.append(f"{what} (accepted by {both_flags('--allow-config-mismatch')})")
    return warnings


def check_clock(
    baseline: QmaxArtifact, slo_metric: str, *, baseline_name: str, new_name: str
) -> None:
    """Refuse a baseline whose SLO held another clock: no flag accepts it, as their p95 and Q_max
    time different moments of each request."""
    if baseline.slo_metric != slo_metric:
        raise MismatchError(
            f"field 'slo_metric': {baseline_name} held its SLO on the {baseline.slo_metric} "
            f"clock, {new_name} on the {slo_metric} clock: expected the same clock (their p95 "
            f"and Q_max time different moments); measure again with "
            f"{both_flags('--slo-metric')} {baseline.slo_metric}"
        )


def compare_qmax(
    baseline: QmaxArtifact,
    new: QmaxArtifact,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    allow_config_mismatch: bool = False,
    baseline_name: str = "baseline",
    new_name: str = "new run",
) -> Comparison:
    """Q_max and p95 TTFAB per common rung of `new` against `baseline` (rule: module docstring)."""
    if not math.isfinite(tolerance) or tolerance < 0:
        raise InputError(f"--regression-tolerance {tolerance:g}: expected a number >= 0")
    if not baseline.complete:
        raise ArtifactError(
            f"{baseline_name}: field 'complete': false (an interrupted run, stop_reason "
            f"{baseline.stop_reason!r}); expected a complete qmax artifact as the baseline"
        )
    check_clock(baseline, new.slo_metric, baseline_name=baseline_name, new_name=new_name)
    warnings = check_identity(
        baseline,
        model=new.model,
        transport=new.transport,
        slug=new.slug,
        slo_ms=new.slo_ms,
        allow_mismatch=allow_config_mismatch,
        baseline_name=baseline_name,
        new_name=new_name,
    )
    if not new.complete:
        warnings.append(f"{new_name} is an interrupted run: its Q_max may be too low")
    old_rungs = _by_concurrency(baseline.rungs)
    new_rungs = _by_concurrency(new.rungs)
    common = sorted(set(old_rungs) & set(new_rungs))
    comparable = [c for c in common if _usable(old_rungs[c]) and _usable(new_rungs[c])]
    z = NormalDist().inv_cdf(1 - FAMILY_ALPHA / len(comparable)) if comparable else None
    checks = [_qmax_check(baseline, new)]
    for concurrency in sorted(set(old_rungs) | set(new_rungs)):
        old, fresh = old_rungs.get(concurrency), new_rungs.get(concurrency)
        if z is not None and old is not None and fresh is not None and concurrency in comparable:
            checks.append(_ttfab_check(old, fresh, z=z, tolerance=tolerance))
        else:
            checks.append(_skipped(concurrency, old, fresh))
    if not comparable:
        warnings.append(
            f"no concurrency was measured usably by both runs: p95 {_clock(new)} was not compared "
            f"(use the baseline's {both_flags('--ladder')})"
        )
    return Comparison(
        baseline_name=baseline_name,
        new_name=new_name,
        tolerance=tolerance,
        checks=tuple(checks),
        warnings=tuple(warnings),
        z=z,
        rule=None if z is None else _rule(z, tolerance, _clock(new)),
    )


def _clock(artifact: QmaxArtifact) -> str:
    return CLOCK_WORDS[artifact.slo_metric]


def _rule(z: float, tolerance: float, clock: str) -> str:
    """The p95 threshold in words, with this comparison's numbers."""
    return (
        f"p95 {clock} threshold = baseline + {tolerance:g} x max(noise, floor); "
        f"noise = {z:.2f} x sqrt(se_baseline^2 + se_new^2) from the p95 intervals, "
        f"floor = max({MIN_RISE_FRACTION:.0%} of baseline, {MIN_RISE_MS:g} ms)"
    )


def _show(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)


def _by_concurrency(rungs: Iterable[Rung]) -> dict[int, Rung]:
    """One rung per concurrency; where a ladder was repeated, the last run's."""
    out: dict[int, Rung] = {}
    for rung in sorted(rungs, key=lambda r: r.run):
        out[rung.concurrency] = rung
    return out


def _usable(rung: Rung) -> bool:
    return rung.usable and _p95(rung) is not None


def _p95(rung: Rung) -> float | None:
    """The rung's p95 of delivered requests on its SLO clock."""
    judged = rung.judged_ms
    return None if judged is None else judged.p95


def _check_name(rung: Rung, concurrency: int) -> str:
    """`ttfab_p95@N=4`; on another clock, `audible_p95@N=4` or `playback_p95@N=4`."""
    return f"{rung.slo_metric}_p95@N={concurrency}"


def _qmax_check(baseline: QmaxArtifact, new: QmaxArtifact) -> Check:
    old_q, new_q = baseline.q_max, new.q_max

    def made(status: CheckStatus, detail: str) -> Check:
        return Check(
            name="q_max",
            status=status,
            baseline=None if old_q is None else float(old_q),
            new=None if new_q is None else float(new_q),
            threshold=None if old_q is None else float(old_q),
            detail=detail,
            relation=">=",
        )

    if old_q is None:
        if new_q is None:
            return made("ok", "neither run found a rung within the SLO")
        return made("improved", "the baseline found no rung within the SLO")
    if new_q is not None and new_q >= old_q:
        if new_q > old_q:
            return made("improved", "holds more concurrent requests than the baseline")
        return made("ok", "same Q_max")
    return made("regressed", _why_lower(baseline, new, old_q))


def _why_lower(baseline: QmaxArtifact, new: QmaxArtifact, old_q: int) -> str:
    new_q = new.q_max
    found = "found no rung within the SLO" if new_q is None else f"found Q_max {new_q}"
    rungs = _by_concurrency(new.rungs)
    deciding = sorted(c for c, r in rungs.items() if not r.meets_slo and c <= old_q)
    if not deciding:
        top = max(rungs, default=0)
        return (
            f"the new ladder {found} and measured nothing failing up to {top}: extend "
            f"{both_flags('--ladder')} "
            f"to at least {old_q} to show the baseline's Q_max still holds"
        )
    rung = rungs[deciding[0]]
    if not rung.usable:
        why = f"rung N={rung.concurrency} was unusable ({rung.unusable_reason})"
    else:
        p95 = _p95(rung) or 0.0
        why = (
            f"rung N={rung.concurrency} had p95 {_clock(new)} {p95:.1f} ms > SLO {new.slo_ms:g} ms"
        )
        ci = rung.judged_ci_ms
        if ci is not None and ci.low <= new.slo_ms <= ci.high:
            why += f" (inconclusive: its p95 interval {ci.low:.1f}-{ci.high:.1f} ms holds the SLO)"
    return f"the new ladder {found} below the baseline's {old_q}: {why}"


def _standard_error(rung: Rung, side: Literal["up", "down"]) -> float:
    """Standard error of the rung's p95 on its clock, on one side (see the module docstring)."""
    summary = rung.judged_ms
    assert summary is not None
    p95 = summary.p95
    assert p95 is not None
    ci = rung.judged_ci_ms
    if ci is not None:
        z = NormalDist().inv_cdf(0.5 + ci.level / 2)
        half = ci.high - p95 if side == "up" else p95 - ci.low
        return max(half, 0.0) / z
    count = summary.count or 0
    if count >= 2 and summary.p90 is not None and summary.p99 is not None:
        spread = summary.p99 - summary.p90
        if spread > 0:
            density = (0.99 - 0.90) / spread
            return math.sqrt(QUANTILE * (1 - QUANTILE) / count) / density
    return 0.0


def _ttfab_check(old: Rung, new: Rung, *, z: float, tolerance: float) -> Check:
    old_p95, new_p95 = _p95(old), _p95(new)
    assert old_p95 is not None
    assert new_p95 is not None
    if _open_above(old):
        # Its upper side is unbounded: no rise can be told from the baseline's own noise.
        return _skipped(old.concurrency, old, new)
    floor = max(MIN_RISE_FRACTION * old_p95, MIN_RISE_MS)
    rise_noise = z * math.hypot(_standard_error(old, "up"), _standard_error(new, "down"))
    fall_noise = z * math.hypot(_standard_error(old, "down"), _standard_error(new, "up"))
    rise_allowed = tolerance * max(rise_noise, floor)
    threshold = old_p95 + rise_allowed
    change = new_p95 - old_p95
    detail = (
        f"{change:+.1f} ms; allowance {tolerance:g} x max(noise {rise_noise:.1f} ms, "
        f"floor {floor:.1f} ms) = {rise_allowed:.1f} ms"
    )
    if new_p95 > threshold:
        status: CheckStatus = "regressed"
    elif not _open_above(new) and new_p95 < old_p95 - tolerance * max(fall_noise, floor):
        status = "improved"
    else:
        status = "ok"
    return Check(
        name=_check_name(old, old.concurrency),
        status=status,
        baseline=old_p95,
        new=new_p95,
        threshold=threshold,
        detail=detail,
        concurrency=old.concurrency,
        unit="ms",
    )


def _open_above(rung: Rung) -> bool:
    """The rung's p95 interval has no upper bound: too few requests to bound it (stats)."""
    return rung.judged_ci_ms is not None and not rung.judged_ci_ms.bounded_above


def _skipped(concurrency: int, old: Rung | None, new: Rung | None) -> Check:
    if old is None:
        why = "measured only by the new run"
    elif new is None:
        why = "measured only by the baseline"
    elif _usable(old) and _usable(new) and _open_above(old):
        why = (
            "the baseline's p95 interval is open above (too few requests to bound it): "
            "a rise cannot be told from its noise"
        )
    else:
        parts = [
            f"{who} rung unusable ({rung.unusable_reason or 'no p95'})"
            for who, rung in (("baseline", old), ("new", new))
            if not _usable(rung)
        ]
        why = "; ".join(parts)
    known = old if old is not None else new
    return Check(
        name=f"ttfab_p95@N={concurrency}" if known is None else _check_name(known, concurrency),
        status="skipped",
        baseline=None,
        new=None,
        threshold=None,
        detail=why,
        concurrency=concurrency,
        unit="ms",
    )
