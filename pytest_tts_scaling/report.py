"""What the HTML report shows: pictures and tables built from artifacts.

Plots are PNG bytes made with matplotlib's Agg backend (imported inside the functions so the
plugin costs nothing until a report is drawn); tables are HTML rendered with Jinja2.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import Any, Literal

from jinja2 import Environment, PackageLoader, select_autoescape

from pytest_tts_scaling.schema import QmaxArtifact, TtotalArtifact

UNTRAINED_NOTE = (
    "Measured on the offline development model: an untrained Kokoro-82M of the real "
    "architecture. Its audio is noise; its timings are those of the real network."
)

_templates = Environment(
    loader=PackageLoader("pytest_tts_scaling", "templates"),
    autoescape=select_autoescape(["html"]),
    keep_trailing_newline=True,
)


@dataclass(frozen=True)
class Extra:
    kind: Literal["png", "html", "text"]
    content: str
    name: str


@dataclass
class ReportExtras:
    """Extras one test adds to its row of the pytest-html report."""

    items: list[Extra] = field(default_factory=list)

    def png(self, data: bytes, name: str) -> None:
        self.items.append(Extra("png", base64.b64encode(data).decode("ascii"), name))

    def html(self, content: str, name: str) -> None:
        self.items.append(Extra("html", content, name))

    def text(self, content: str, name: str) -> None:
        self.items.append(Extra("text", content, name))


def render(template: str, **context: Any) -> str:
    return _templates.get_template(template).render(**context)


def _figure_png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buffer.getvalue()


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ladder_png(artifact: QmaxArtifact, baseline: QmaxArtifact | None = None) -> bytes:
    """p95 TTFAB per rung against the SLO, with the Q_max bracket; throughput below."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    rungs = sorted(artifact.rungs, key=lambda r: r.concurrency)
    xs = [r.concurrency for r in rungs]
    p95 = [r.ttfab_ms.p95 if r.ttfab_ms.p95 is not None else float("nan") for r in rungs]
    top.plot(xs, p95, "o-", color="tab:blue", label="p95 TTFAB")
    for rung, y in zip(rungs, p95, strict=True):
        if rung.ttfab_p95_ci_ms is not None:
            top.vlines(
                rung.concurrency,
                rung.ttfab_p95_ci_ms.low,
                rung.ttfab_p95_ci_ms.high,
                color="tab:blue",
                alpha=0.4,
            )
        if not rung.usable:
            top.plot(rung.concurrency, y, "x", color="tab:red", markersize=10)
    if baseline is not None:
        base = sorted(baseline.rungs, key=lambda r: r.concurrency)
        top.plot(
            [r.concurrency for r in base],
            [r.ttfab_ms.p95 if r.ttfab_ms.p95 is not None else float("nan") for r in base],
            "s--",
            color="tab:gray",
            label="baseline p95 TTFAB",
        )
    top.axhline(
        artifact.slo_ms, color="tab:red", linestyle="--", label=f"SLO {artifact.slo_ms:g} ms"
    )
    if artifact.q_max is not None:
        top.axvline(artifact.q_max, color="tab:green", label=f"Q_max {artifact.q_max}")
        failing = [
            r.concurrency for r in rungs if not r.meets_slo and r.concurrency > artifact.q_max
        ]
        if artifact.q_max_bracketed and failing:
            top.axvspan(
                artifact.q_max, min(failing), color="tab:green", alpha=0.1, label="Q_max bracket"
            )
    top.set_ylabel("TTFAB p95 (ms)")
    title = f"{artifact.model} over {artifact.transport} on {artifact.slug}"
    if artifact.endpoint == "local":
        title += "\n(untrained development model of the real architecture)"
    top.set_title(title)
    top.legend(loc="upper left", fontsize="small")
    top.grid(alpha=0.3)
    bottom.bar(
        xs,
        [r.throughput_rps for r in rungs],
        color="tab:purple",
        alpha=0.7,
        width=max(0.4, min(xs) * 0.6) if xs else 0.8,
    )
    bottom.set_xlabel("concurrent requests (closed loop)")
    bottom.set_ylabel("completions / s")
    bottom.grid(alpha=0.3)
    return _figure_png(fig)


def rung_table_html(artifact: QmaxArtifact) -> str:
    return render("rungs.html.j2", artifact=artifact, note=_note_for(artifact))


def _note_for(artifact: QmaxArtifact) -> str | None:
    return UNTRAINED_NOTE if artifact.endpoint == "local" else None


def waterfall_png(artifact: TtotalArtifact) -> bytes:
    """Each stage as a bar from its predecessor, on seconds since desired_set; bounds hatched."""
    plt = _pyplot()
    stages = [s for s in artifact.stages if s.elapsed_s is not None]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(stages) + 1.6))
    previous = min((s.elapsed_s or 0.0) for s in stages) if stages else 0.0
    for row, stage in enumerate(stages):
        end = stage.elapsed_s or 0.0
        start = min(previous, end)
        dominant = stage.stage == artifact.dominant_stage
        ax.barh(
            row,
            max(end - start, 0.05),
            left=start,
            color="tab:red" if dominant else "tab:blue",
            hatch="//" if stage.bounded else None,
            alpha=0.8,
        )
        ax.text(end, row, f" {end:.1f} s ({stage.source})", va="center", fontsize="x-small")
        previous = end
    ax.axvline(artifact.t_measured_s, color="tab:gray", linestyle="--")
    ax.set_yticks(range(len(stages)), [s.stage for s in stages])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since desired_set (hatched: a bound)")
    ax.set_title(
        f"T_total {artifact.t_total_s:.1f} s = {artifact.t_measured_s:.1f} s measured + "
        f"{artifact.policy_lag_bound_s:.0f} s policy lag bound"
    )
    ax.grid(axis="x", alpha=0.3)
    return _figure_png(fig)
