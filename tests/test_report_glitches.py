"""The report's small lies, each fixed and held: ticks, clipping, contradicting words, units, and an
axis around nothing."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("matplotlib", reason=needs_extra("matplotlib"))

import re
from collections.abc import Callable

from pytest_tts_scaling.core.schema import QmaxArtifact
from pytest_tts_scaling.core.stats import summarize
from pytest_tts_scaling.report.extras import rung_table_html
from pytest_tts_scaling.report.plots import ladder_svg, throughput_svg, underrun_svg
from tests.factories import make_qmax, make_rung


def tick_labels(svg: str, axis: str) -> list[str]:
    """The tick labels of one axis, as the SVG keeps them (text, svg.fonttype none)."""
    starts = [m.end() for m in re.finditer(rf'<g id="{axis}tick_\d+">', svg)]
    text = re.compile(r"<text[^>]*>([^<]*)</text>")
    return [found.group(1) for at in starts if (found := text.search(svg, at)) is not None]


def one_rung_run() -> QmaxArtifact:
    rung = make_rung(1, ttfab_p95_ms=900.0, throughput_rps=1.2, concurrency_mean=1.0)
    return make_qmax([rung], q_max=1, q_max_bracketed=False, s_mean_s=2.844, s_p95_s=3.1)


@pytest.mark.parametrize("plot", [ladder_svg, throughput_svg])
def test_a_one_rung_run_has_whole_number_ticks(plot: Callable[[QmaxArtifact], str]) -> None:
    svg = plot(one_rung_run())
    labels = tick_labels(svg, "x")
    assert labels, "no x tick labels found"
    assert all(re.fullmatch(r"\d+", label) for label in labels), labels


def test_headroom_keeps_the_highest_value_inside() -> None:
    """The throughput marker was cut by the top edge: the axis now ends a tenth above it."""
    from pytest_tts_scaling.report.plots import headroom, new_figure

    fig, ax = new_figure(4, 3)
    headroom(ax, [3.0, float("nan"), 5.0])
    assert ax.get_ylim() == (0.0, pytest.approx(5.5))
    headroom(ax, [0.0, 0.0])
    assert ax.get_ylim() == (0.0, 1.0)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_the_underrun_axis_of_all_zeros_is_not_a_span_around_nothing() -> None:
    zero = summarize([0.0, 0.0, 0.0])
    rungs = [make_rung(n, underrun_ms=zero) for n in (1, 2)]
    svg = underrun_svg(make_qmax(rungs, q_max=2, q_max_bracketed=False))
    values = [float(x.replace("\u2212", "-")) for x in tick_labels(svg, "y")]
    assert min(values) >= 0, values
    assert max(values) >= 0.5, values


def test_the_rung_table_says_what_the_terminal_says_in_one_unit() -> None:
    html = rung_table_html(make_qmax([make_rung(1, meets_slo=False, fail_reason="slo")]))
    assert "no rung met the SLO" in html
    assert "not found" not in html
    assert "lower bound" not in html
    bracketed = make_qmax(
        [make_rung(1), make_rung(2, meets_slo=False, fail_reason="slo", ttfab_p95_ms=4000)],
        q_max=1,
        s_mean_s=2.844,
        s_p95_s=3.1,
    )
    html = rung_table_html(bracketed)
    assert "Q_max 1 (bracketed: N=2 failed, p95 TTFAB 4000 ms &gt; SLO 3000 ms)" in html
    assert "S mean 2844 ms, S p95 3100 ms" in html
    assert " s, S p95" not in html
    assert "All times in ms" not in html
