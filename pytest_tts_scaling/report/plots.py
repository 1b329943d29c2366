"""SVG plots of qmax and ttotal artifacts, drawn by matplotlib.

matplotlib is imported inside the functions, so the plugin costs nothing until a report is
drawn. The SVG keeps its text as text and carries no timestamp (the same plot, the same bytes);
pages embed it as a data URI so each stands alone. Every plot of the development model or the
synthetic engine says so in its title.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any, ParamSpec

from pytest_tts_scaling.core.schema import CLOCK_WORDS, QmaxArtifact, Rung, Summary, TtotalArtifact
from pytest_tts_scaling.optional import installed
from pytest_tts_scaling.report.extras import (
    DEV_MODEL_LABEL,
    SYNTHETIC_LABEL,
    Artifact,
    made_by_dev_model,
    made_by_synthetic_engine,
    timed_stages,
    weights_label,
)

# --- plotting helpers ----------------------------------------------------------------------

P = ParamSpec("P")

# What a report shows in a plot's place without matplotlib (the [report] extra).
LEFT_OUT_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="720" height="40"><text x="8" y="24" '
    'font-family="sans-serif" font-size="14">plot left out: matplotlib comes with the [report] '
    "extra (pip install 'pytest-tts-scaling[report]')</text></svg>"
)


def plot(draw: Callable[P, str]) -> Callable[P, str]:
    """A plot function that gives LEFT_OUT_SVG where matplotlib is not installed: the report and
    its tables stay whole in a base install."""

    @functools.wraps(draw)
    def drawn(*args: P.args, **kwargs: P.kwargs) -> str:
        return draw(*args, **kwargs) if installed("matplotlib") else LEFT_OUT_SVG

    return drawn


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_svg(fig: Any) -> str:
    """The figure as standalone SVG text (fonts as text, no timestamp: the same plot, the same
    bytes)."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(
        buffer,
        format="svg",
        bbox_inches="tight",
        metadata={"Date": None},
    )
    plt.close(fig)
    return buffer.getvalue()


def new_figure(width: float, height: float, rows: int = 1) -> tuple[Any, Any]:
    """A figure of `rows` axes sharing x, drawn with SVG text and stable ids."""
    plt = _pyplot()
    plt.rcParams["svg.fonttype"] = "none"
    plt.rcParams["svg.hashsalt"] = "tts-scaling"
    return plt.subplots(rows, 1, figsize=(width, height), sharex=True)


def set_title(ax: Any, text: str, artifact: Artifact) -> None:
    """The plot's title; a plot of the development model says so (every plot it made)."""
    label = weights_label(artifact)
    if made_by_synthetic_engine(artifact):
        text += f"\n({SYNTHETIC_LABEL})"
    elif made_by_dev_model(artifact):
        text += f"\n({DEV_MODEL_LABEL})"
    elif label is not None:
        text += f"\n(Kokoro-82M, {label} weights)"
    ax.set_title(text, fontsize="medium")


def finish(
    fig: Any,
    ax: Any,
    artifact: Artifact,
    title: str,
    *,
    xlabel: str,
    ylabel: str,
    legend: str | None = "upper left",
) -> str:
    """Labels, legend, grid and the title (naming the development model), then the SVG.

    The x axis counts requests, so its ticks are whole numbers, even where the axis spans less
    than two of them (one rung).
    """
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend is not None:
        ax.legend(loc=legend, fontsize="small", ncol=2)
    ax.grid(alpha=0.3)
    set_title(ax, title, artifact)
    return figure_svg(fig)


def headroom(ax: Any, values: Sequence[float]) -> None:
    """The y axis from 0 to a tenth above the highest finite value, so no marker is cut by the
    top edge; 1 when there is nothing above 0 (not a span of ±0.04 around nothing)."""
    finite = [v for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    ax.set_ylim(0, top * 1.1 if top > 0 else 1.0)


def _value(x: float | None) -> float:
    return float("nan") if x is None else x


def _rungs(artifact: QmaxArtifact) -> list[Rung]:
    """The rungs by concurrency (an artifact keeps the one run its Q_max was taken from)."""
    return sorted(artifact.rungs, key=lambda r: (r.concurrency, r.run))


def _q_max_marks(ax: Any, artifact: QmaxArtifact, rungs: Sequence[Rung]) -> None:
    if artifact.q_max is None:
        return
    label = f"Q_max {artifact.q_max}" + ("" if artifact.q_max_bracketed else " (lower bound)")
    ax.axvline(artifact.q_max, color="tab:green", label=label)
    failing = [r.concurrency for r in rungs if not r.meets_slo and r.concurrency > artifact.q_max]
    if artifact.q_max_bracketed and failing:
        ax.axvspan(artifact.q_max, min(failing), color="tab:green", alpha=0.1, label="bracket")


# --- qmax ----------------------------------------------------------------------------------


@plot
def ladder_svg(artifact: QmaxArtifact, baseline: QmaxArtifact | None = None) -> str:
    """p95 on the SLO's clock (TTFAB unless the artifact names another) against N with its
    confidence band, the SLO and the Q_max bracket; the p95 time to first audible audio beside it
    where the audio checks had an audible reference, and the word error rate on a right-hand
    axis where the run transcribed answers."""
    fig, ax = new_figure(14, 3.6)
    rungs = _rungs(artifact)
    xs = [r.concurrency for r in rungs]
    clock = CLOCK_WORDS[artifact.slo_metric]
    ax.plot(xs, [_value(_judged(r, "p95")) for r in rungs], "o-", color="tab:blue", label="p95")
    ax.plot(xs, [_value(_judged(r, "p50")) for r in rungs], ".:", color="tab:blue", label="p50")
    if any(r.audible_ms is not None for r in rungs):
        ax.plot(
            xs,
            [_value(r.audible_ms.p95 if r.audible_ms else None) for r in rungs],
            "^-",
            color="tab:orange",
            label="p95 first audible audio",
        )
    with_ci = [(r.concurrency, r.judged_ci_ms) for r in rungs if r.judged_ci_ms is not None]
    if with_ci:
        ax.fill_between(
            [c for c, _ in with_ci],
            [ci.low for _, ci in with_ci],
            [ci.high for _, ci in with_ci],
            color="tab:blue",
            alpha=0.2,
            label="p95 95% interval",
        )
    unusable = [r for r in rungs if not r.usable]
    if unusable:
        ax.plot(
            [r.concurrency for r in unusable],
            [_value(_judged(r, "p95")) for r in unusable],
            "x",
            color="tab:red",
            markersize=10,
            label="unusable rung",
        )
    if baseline is not None:
        base = _rungs(baseline)
        ax.plot(
            [r.concurrency for r in base],
            [_value(_judged(r, "p95")) for r in base],
            "s--",
            color="tab:gray",
            label="baseline p95",
        )
    ax.axhline(artifact.slo_ms, color="tab:red", linestyle="--", label=f"SLO {artifact.slo_ms:g}")
    _q_max_marks(ax, artifact, rungs)
    ax.set_ylim(bottom=0)
    _wer_axis(ax, rungs)
    what = "time to first audio byte" if artifact.slo_metric == "ttfab" else f"time to {clock}"
    return finish(
        fig,
        ax,
        artifact,
        f"p95 {what} against concurrency: {artifact.model} over "
        f"{artifact.transport} on {artifact.slug}",
        xlabel="concurrent requests N (closed loop)",
        ylabel=f"{clock} (ms)",
    )


def _judged(rung: Rung, quantile: str) -> float | None:
    """A quantile of the rung's delivered requests on its SLO clock."""
    judged = rung.judged_ms
    return None if judged is None else getattr(judged, quantile)


def _wer_axis(ax: Any, rungs: Sequence[Rung]) -> None:
    """With --wer-sample: the rungs' word error rate on a right-hand axis, in the same legend."""
    with_wer = [r for r in rungs if r.wer is not None]
    if not with_wer:
        return
    right = ax.twinx()
    right.plot(
        [r.concurrency for r in with_wer],
        [r.wer for r in with_wer],
        "D-",
        color="tab:purple",
        label="word error rate (right)",
    )
    right.set_ylabel("word error rate")
    right.set_ylim(bottom=0, top=max(1.0, *(r.wer or 0.0 for r in with_wer)))
    # One legend for both axes: the line joins the left axis's handles.
    ax.plot([], [], "D-", color="tab:purple", label="word error rate (right)")


@plot
def throughput_svg(artifact: QmaxArtifact) -> str:
    """Completions per second against N, Little's law N / mean latency beside it, and the knee."""
    from pytest_tts_scaling.core.curve import ServiceCurve
    from pytest_tts_scaling.core.plan import knee_concurrency

    fig, ax = new_figure(14, 3.2)
    rungs = _rungs(artifact)
    xs = [r.concurrency for r in rungs]
    ax.plot(xs, [r.throughput_rps for r in rungs], "o-", color="tab:purple", label="measured")
    little = [
        r.concurrency_mean / (r.latency_ms.mean / 1000.0)
        if r.latency_ms.mean and r.latency_ms.mean > 0
        else math.nan
        for r in rungs
    ]
    ax.plot(
        xs, little, "s--", color="tab:orange", label="Little's law: mean in flight / mean latency"
    )
    # A knee needs a curve (two usable rungs) that met the SLO somewhere: the lone rung of a run
    # where nothing passed is no knee.
    curved = sum(1 for r in rungs if r.usable) >= 2 and any(r.meets_slo for r in rungs)
    if curved:
        at = knee_concurrency(ServiceCurve.from_rungs(rungs))
        ax.axvline(at, color="tab:brown", linestyle=":", label=f"knee at N={at:g}")
    _q_max_marks(ax, artifact, rungs)
    headroom(ax, [r.throughput_rps for r in rungs] + little)
    return finish(
        fig,
        ax,
        artifact,
        "throughput against concurrency",
        xlabel="concurrent requests N (closed loop)",
        ylabel="completions / s",
        legend="lower right",
    )


def _quantile_boxes(ax: Any, rungs: Sequence[Rung], metric: str, colour: str) -> None:
    """Per rung: a box from p50 to p95, whiskers from min to max, p90 and p99 ticks."""
    if rungs:
        low, high = rungs[0].concurrency, rungs[-1].concurrency
        pad = max(0.5, 0.03 * (high - low))
        ax.set_xlim(low - pad, high + pad)
    stats = []
    positions = []
    for r in rungs:
        s: Summary | None = getattr(r, metric)
        if s is None or s.p50 is None or s.count == 0:
            continue
        stats.append(
            {
                "med": s.p50,
                "q1": s.p50,
                "q3": _value(s.p95),
                "whislo": _value(s.min),
                "whishi": _value(s.max),
            }
        )
        positions.append(r.concurrency)
        ax.plot([r.concurrency] * 2, [_value(s.p90), _value(s.p99)], "_", color="black", ms=9)
    if stats:
        width = 0.5 * min((b - a for a, b in pairwise(positions)), default=1)
        ax.bxp(
            stats,
            positions=positions,
            widths=max(width, 0.2),
            showfliers=False,
            manage_ticks=False,
            patch_artist=True,
            boxprops={"facecolor": colour, "alpha": 0.5},
            medianprops={"color": "black"},
        )


@plot
def ttfab_distribution_svg(artifact: QmaxArtifact) -> str:
    fig, ax = new_figure(14, 3.2)
    rungs = _rungs(artifact)
    _quantile_boxes(ax, rungs, "ttfab_ms", "tab:blue")
    ax.axhline(artifact.slo_ms, color="tab:red", linestyle="--", label=f"SLO {artifact.slo_ms:g}")
    return finish(
        fig,
        ax,
        artifact,
        "TTFAB distribution per rung: box p50-p95, ticks p90 and p99, whiskers min-max",
        xlabel="concurrent requests N",
        ylabel="TTFAB (ms)",
    )


@plot
def underrun_svg(artifact: QmaxArtifact) -> str:
    fig, ax = new_figure(14, 3.0)
    rungs = _rungs(artifact)
    _quantile_boxes(ax, rungs, "underrun_ms", "tab:orange")
    headroom(ax, [_value(r.underrun_ms.max) for r in rungs if r.underrun_ms is not None])
    if not any(r.underrun_ms for r in rungs):
        ax.text(
            0.5, 0.5, "no underrun measured in this artifact", transform=ax.transAxes, ha="center"
        )
    return finish(
        fig,
        ax,
        artifact,
        "underrun per rung: how long a player starting at the first byte would stall",
        xlabel="concurrent requests N",
        ylabel="stall per stream (ms)",
        legend=None,
    )


@plot
def listener_svg(artifact: QmaxArtifact) -> str:
    """The listener's clocks per rung (p50 and p95): first audible speech as it plays and
    glitch-free playback, with TTFAB beneath them and the SLO."""
    fig, ax = new_figure(14, 3.2)
    rungs = _rungs(artifact)
    xs = [r.concurrency for r in rungs]
    for field, label, colour in (
        ("ttfab_ms", "TTFAB", "tab:blue"),
        ("speech_ms", "first audible speech", "tab:orange"),
        ("glitch_free_ms", "glitch-free playback", "tab:green"),
    ):
        summaries = [getattr(r, field) for r in rungs]
        if not any(s is not None and s.p95 is not None for s in summaries):
            continue
        for quantile, style in (("p95", "o-"), ("p50", ".:")):
            values = [_value(getattr(s, quantile) if s else None) for s in summaries]
            ax.plot(xs, values, style, color=colour, label=f"{quantile} {label}")
    ax.axhline(artifact.slo_ms, color="tab:red", linestyle="--", label=f"SLO {artifact.slo_ms:g}")
    ax.set_ylim(bottom=0)
    return finish(
        fig,
        ax,
        artifact,
        "the listener's clocks per rung: when speech is first heard, and the earliest start from "
        "which playback never runs dry",
        xlabel="concurrent requests N",
        ylabel="ms from the request",
    )


# --- ttotal --------------------------------------------------------------------------------


@plot
def waterfall_svg(artifact: TtotalArtifact) -> str:
    """Each stage as a bar from its predecessor, on seconds since desired_set; bounds hatched."""
    stages = [s for s in timed_stages(artifact) if s.elapsed_s is not None]
    fig, ax = new_figure(14, 0.42 * len(stages) + 1.8)
    previous = min((s.elapsed_s or 0.0) for s in stages) if stages else 0.0
    for row, stage in enumerate(stages):
        end = stage.elapsed_s or 0.0
        start = min(previous, end)
        ax.barh(
            row,
            max(end - start, 0.05),
            left=start,
            color="tab:red" if stage.stage == artifact.dominant_stage else "tab:blue",
            hatch="//" if stage.bounded else None,
            alpha=0.8,
        )
        ax.text(end, row, f" {end:.1f} s ({stage.source})", va="center", fontsize="x-small")
        previous = end
    ax.axvline(artifact.t_measured_s, color="tab:gray", linestyle="--")
    ax.set_yticks(range(len(stages)), [s.stage for s in stages])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since desired_set (hatched: a bound; red: the dominant stage)")
    ax.grid(axis="x", alpha=0.3)
    set_title(
        ax,
        f"T_total {artifact.t_total_s:.1f} s = {artifact.t_measured_s:.1f} s measured + "
        f"{artifact.policy_lag_bound_s:.0f} s policy lag bound",
        artifact,
    )
    return figure_svg(fig)
