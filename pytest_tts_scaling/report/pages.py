"""The answer of an artifact, for the report's first screen and for a page of its own.

Each artifact becomes a :class:`View`: a headline (Q_max, T_total or the plan's verdict), the
facts that say whether to trust it, full-width plots and the long tables. One template draws
the answer (``answer.html.j2``) both on top of the pytest-html report and in the standalone
page (``page.html.j2``, which adds the tables), so the two never disagree.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pytest_tts_scaling.artifacts import write_atomic
from pytest_tts_scaling.core.confirm import change_words
from pytest_tts_scaling.core.next_step import next_step_line
from pytest_tts_scaling.core.schema import (
    CLOCK_WORDS,
    PlanArtifact,
    QmaxArtifact,
    Rung,
    TtotalArtifact,
)
from pytest_tts_scaling.core.verdicts import CLIENT_SHORTFALL, doubt_line
from pytest_tts_scaling.report.extras import (
    UNTRAINED_NOTE,
    Artifact,
    Shown,
    made_by_dev_model,
    render,
    rung_table_html,
    stages_table_html,
    weights_label,
)
from pytest_tts_scaling.report.plots import (
    ladder_svg,
    listener_svg,
    throughput_svg,
    ttfab_distribution_svg,
    underrun_svg,
    waterfall_svg,
)

if TYPE_CHECKING:
    from pytest_tts_scaling.core.plan import PlanOutcome

State = Literal["ok", "warn", "bad", "info"]
VERDICT_STATE: dict[str, State] = {"ok": "ok", "warn": "warn", "stop": "bad"}


@dataclass(frozen=True)
class Fact:
    label: str
    value: str
    state: State = "info"


@dataclass(frozen=True)
class Figure:
    key: str
    caption: str
    svg: str

    @property
    def data_uri(self) -> str:
        return "data:image/svg+xml;base64," + base64.b64encode(self.svg.encode()).decode("ascii")


@dataclass(frozen=True)
class View:
    kind: Literal["qmax", "ttotal", "plan"]
    subject: str
    headline: str
    qualifier: str
    state: State
    facts: list[Fact]
    trust: list[Fact]
    figures: list[Figure]
    tables: str
    artifact_path: Path
    notes: list[str] = field(default_factory=list)

    @property
    def page(self) -> str:
        """The standalone page's file name: the artifact's, with .html."""
        return self.artifact_path.with_suffix(".html").name

    def artifact_href(self, base: Path) -> str:
        """The artifact's address relative to a page written in `base`."""
        return Path(os.path.relpath(self.artifact_path.resolve(), base.resolve())).as_posix()


def qmax_view(artifact: QmaxArtifact, path: Path) -> View:
    rungs = artifact.rungs
    usable = [r for r in rungs if r.usable]
    thin = [r for r in usable if r.few_samples]
    short = [
        r.concurrency
        for r in rungs
        if r.completed and r.concurrency_mean < (1 - CLIENT_SHORTFALL) * r.concurrency
    ]
    found = artifact.q_max is not None
    changed = artifact.confirmation is not None and artifact.confirmation.outcome == "changed"
    facts = _qmax_facts(artifact)
    trust = _qmax_trust(artifact, usable, thin, short, changed)
    doubt = doubt_line(artifact)
    if doubt is not None:
        trust.insert(0, Fact("answer settled", "no: INCONCLUSIVE", "warn"))
    notes = [doubt.removeprefix("qmax: ")] if doubt is not None else []
    notes += [step] if (step := next_step_line(artifact, "pytest")) is not None else []
    notes += [UNTRAINED_NOTE] if made_by_dev_model(artifact) else []
    figures = _qmax_figures(artifact)
    return View(
        kind="qmax",
        subject=f"{artifact.model} over {artifact.transport} on {artifact.slug}",
        headline=f"Q_max {artifact.q_max}" if found else "Q_max not found",
        qualifier=(
            ("bracketed" if artifact.q_max_bracketed else "lower bound")
            if found
            else "the server changed speed during the run"
            if changed
            else "no rung met the SLO"
            if rungs
            else "no rung measured"
        )
        + (", INCONCLUSIVE" if doubt is not None else ""),
        state=("ok" if artifact.q_max_bracketed and doubt is None else "warn") if found else "bad",
        facts=facts,
        trust=trust,
        figures=figures,
        tables=rung_table_html(artifact),
        artifact_path=path,
        notes=notes,
    )


def _qmax_facts(artifact: QmaxArtifact) -> list[Fact]:
    """What was measured, on what: the first screen's facts."""
    s_mean, s_p95 = artifact.s_mean_s, artifact.s_p95_s
    facts = [
        Fact("SLO", f"p95 {CLOCK_WORDS[artifact.slo_metric]} ≤ {artifact.slo_ms:g} ms"),
        Fact("endpoint", artifact.endpoint),
        Fact("slug", artifact.slug),
        Fact("model · transport", f"{artifact.model} · {artifact.transport}"),
        Fact("weights", weights_label(artifact) or "not recorded"),
        Fact(
            "service time S at N=1",
            "–"
            if s_mean is None
            else f"mean {s_mean * 1000:.0f} ms, p95 {(s_p95 or 0) * 1000:.0f} ms",
        ),
        Fact("measured at", artifact.provenance.measured_at),
    ]
    if artifact.slo_tiers:
        facts.insert(
            1,
            Fact(
                "Q_max per SLO tier",
                " · ".join(
                    f"{t.slo_ms:g} ms: {t.q_max if t.q_max is not None else 'none'}"
                    for t in artifact.slo_tiers
                ),
            ),
        )
    if artifact.chars_per_s_at_q_max is not None:
        facts.insert(
            1,
            Fact(
                "speech served at Q_max",
                f"{artifact.chars_per_s_at_q_max:.0f} characters/s, "
                f"{artifact.audio_s_per_s_at_q_max or 0.0:.2f} audio s/s",
            ),
        )
    host = artifact.host
    if host is not None:
        gpu = f", {host.gpu}" if host.gpu else ""
        facts.append(Fact("host", f"{host.cpu_model} × {host.cpu_count}{gpu}"))
    return facts


def _qmax_trust(
    artifact: QmaxArtifact, usable: list[Rung], thin: list[Rung], short: list[int], changed: bool
) -> list[Fact]:
    """How far to trust the answer: frozen capacity, usable rungs, the client, the run, the
    confirmation."""
    rungs = artifact.rungs
    # A local or URL endpoint has no autoscaling to suspend, so not frozen is expected there.
    pinnable = artifact.provenance.origin.split(":", 1)[0] not in ("local", "url")
    trust = [
        Fact(
            "capacity frozen",
            "yes" if artifact.frozen else "no" if pinnable else "no scaling to freeze",
            "ok" if artifact.frozen else "bad" if pinnable else "info",
        ),
        Fact(
            "usable rungs",
            f"{len(usable)} of {len(rungs)}"
            + "".join(
                f"; N={r.concurrency} judged on {r.completed} answer{'s' * (r.completed != 1)}"
                for r in thin
            )
            + (" (too few for a p95)" if thin else ""),
            "ok" if len(usable) == len(rungs) and not thin else "warn",
        ),
        Fact(
            "client held N",
            "every rung" if not short else "not at N=" + ",".join(map(str, short)),
            "ok" if not short else "bad",
        ),
        Fact(
            "run complete",
            "yes" if artifact.complete else f"no ({artifact.stop_reason})",
            "ok" if artifact.complete else "bad",
        ),
    ]
    confirmed = artifact.confirmation
    if confirmed is not None:
        trust.append(
            Fact(
                "answer confirmed",
                f"{confirmed.outcome.replace('_', ' ')}: {change_words(confirmed)}",
                "ok" if confirmed.outcome == "held" else "bad" if changed else "warn",
            )
        )
    return trust


def _qmax_figures(artifact: QmaxArtifact) -> list[Figure]:
    rungs = artifact.rungs
    figures: list[Figure] = (
        []
        if not rungs
        else [
            Figure(
                "ladder",
                f"p95 {CLOCK_WORDS[artifact.slo_metric]} against concurrency, with its 95% "
                "interval and the SLO",
                ladder_svg(artifact),
            ),
            Figure(
                "throughput",
                "throughput against concurrency, Little's law and the knee",
                throughput_svg(artifact),
            ),
            Figure(
                "ttfab-distribution",
                "TTFAB distribution per rung",
                ttfab_distribution_svg(artifact),
            ),
            Figure("underrun", "underrun per rung", underrun_svg(artifact)),
        ]
    )
    if any(r.speech_ms or r.glitch_free_ms for r in rungs):
        figures.append(
            Figure(
                "listener",
                "the listener's clocks per rung: first audible speech and glitch-free playback",
                listener_svg(artifact),
            )
        )
    return figures


def ttotal_view(artifact: TtotalArtifact, path: Path) -> View:
    recovered = artifact.probe.get("recovered")
    if recovered is None:  # no probe record: the timeline says whether traffic recovered
        recovered = any(s.stage == "traffic_recovered" for s in artifact.stages)
    facts = [
        Fact("measured span", f"{artifact.t_measured_s:.1f} s"),
        Fact(
            "policy lag bound",
            f"{artifact.policy_lag_bound_s:.0f} s ({artifact.policy_lag_source or 'bound'})",
        ),
        Fact("dominant stage", artifact.dominant_stage or "–"),
        Fact("trigger", artifact.trigger),
        Fact("slug", artifact.slug),
        Fact("model · transport", f"{artifact.model} · {artifact.transport}"),
    ]
    missing, disordered = artifact.missing_stages, artifact.out_of_order_stages
    trust = [
        Fact("traffic recovered", "yes" if recovered else "no", "ok" if recovered else "warn"),
        Fact("stages missing", ", ".join(missing) or "none", "warn" if missing else "ok"),
        Fact("stages out of order", ", ".join(disordered) or "none", "bad" if disordered else "ok"),
    ]
    return View(
        kind="ttotal",
        subject=f"{artifact.model} over {artifact.transport} on {artifact.slug}",
        headline=f"T_total {artifact.t_total_s:.1f} s",
        qualifier="a bound" if artifact.bounded else "measured",
        state="ok" if recovered else "warn",
        facts=facts,
        trust=trust,
        figures=[
            Figure("waterfall", "the scale-out timeline, stage by stage", waterfall_svg(artifact))
        ],
        tables=stages_table_html(artifact),
        artifact_path=path,
        notes=[UNTRAINED_NOTE] if made_by_dev_model(artifact) else [],
    )


def plan_view(
    plan: PlanArtifact, path: Path, outcome: PlanOutcome | None, why_not: str | None
) -> View:
    from pytest_tts_scaling.report.plan import surge_svg, thresholds_svg

    counts = {v: sum(f.verdict == v for f in plan.findings) for v in ("ok", "warn", "stop")}
    facts = [
        Fact("scale-out target", f"{plan.scaling_target_value:g} in flight per instance"),
        Fact("scale-in threshold", f"{plan.scale_in_threshold:g}"),
        Fact("cooldowns out / in", f"{plan.scale_out_cooldown_s} / {plan.scale_in_cooldown_s} s"),
        Fact(
            "instances",
            f"{plan.min_instances}..{plan.max_instances} (safe floor {plan.min_safe_instances})",
        ),
        Fact("queue_max_depth", str(plan.queue_max_depth)),
        Fact("slug", plan.slug),
    ]
    chosen = next((c for c in plan.candidates or () if c.chosen), None)
    if chosen is not None and plan.inputs.prices is not None:
        facts.append(
            Fact(
                "instance type",
                f"{chosen.instance_type} of {len(plan.candidates or ())} weighed: "
                f"{plan.inputs.prices.currency} {chosen.cost_per_day:,.2f} a day",
            )
        )
    trust = [
        Fact(f.name, f.verdict, VERDICT_STATE[f.verdict])
        for f in plan.findings
        if f.verdict != "ok"
    ] or [Fact("findings", "all ok", "ok")]
    figures = []
    if outcome is not None:
        figures = [
            Figure(
                "thresholds", "the plan's thresholds on the measured curve", thresholds_svg(outcome)
            ),
            Figure(
                "surge",
                "the simulated surge: capacity, in flight per instance, shed requests",
                surge_svg(outcome),
            ),
        ]
    notes = [UNTRAINED_NOTE] if made_by_dev_model(plan) else []
    if why_not:
        notes.append(why_not[0].upper() + why_not[1:] + ".")
    return View(
        kind="plan",
        subject=f"{plan.model} on {plan.slug}",
        headline=f"plan {plan.verdict}",
        qualifier=f"{counts['ok']} ok, {counts['warn']} warn, {counts['stop']} stop",
        state=VERDICT_STATE[plan.verdict],
        facts=facts,
        trust=trust,
        figures=figures,
        tables=render("plan.html.j2", plan=plan),
        artifact_path=path,
        notes=notes,
    )


def view_for(shown: Shown) -> View:
    """The view of one artifact; a plan's outcome is what it stored (or, schema 1, recomputed)."""
    artifact = shown.artifact
    if isinstance(artifact, QmaxArtifact):
        return qmax_view(artifact, shown.path)
    if isinstance(artifact, TtotalArtifact):
        return ttotal_view(artifact, shown.path)
    outcome, why_not = shown.outcome, None
    if outcome is None:
        from pytest_tts_scaling.report.plan import plan_outcome

        outcome, why_not = plan_outcome(artifact, shown.path.parent)
    return plan_view(artifact, shown.path, outcome, why_not)


def answer_html(views: list[View], *, base: Path, pages: bool) -> str:
    """The first screen of a report in `base`: each artifact's answer, links to the pages."""
    return render("answer.html.j2", views=views, base=base, pages=pages)


def page_html(view: View, base: Path) -> str:
    """A self-contained page to be written in `base`: the answer, its plots and the tables."""
    return render("page.html.j2", view=view, base=base)


def write_page(view: View, path: Path) -> Path:
    write_atomic(path, page_html(view, path.parent))
    return path


def load_shown(path: Path) -> Shown:
    """Any committed artifact, recognised by its schema field."""
    from pytest_tts_scaling.artifacts import load_any

    artifact: Artifact = load_any(path)  # type: ignore[assignment]
    return Shown(artifact, path)
