"""`tts-bench report`: a self-contained page for any committed artifact, answer first."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_tts_scaling.cli import main
from pytest_tts_scaling.optional import needs_extra
from pytest_tts_scaling.report.extras import DEV_MODEL_LABEL
from pytest_tts_scaling.report.pages import load_shown, view_for
from pytest_tts_scaling.report.plots import ladder_svg

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "reports" / "examples" / "source"
H200 = ROOT / "reports" / "examples" / "h200-dev-model"
QMAX = SOURCE / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
TTOTAL = SOURCE / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"
PLAN = SOURCE / "plan-kokoro-82m.json"
LOCAL_QMAX = H200 / "qmax-kokoro-82m-response-stream-local-636e7424.json"


def _copy(tmp: Path, *paths: Path) -> list[Path]:
    return [Path(shutil.copy(path, tmp / path.name)) for path in paths]


def _figures(html: str) -> dict[str, str]:
    """data-plot key -> the SVG text of every plot on a page."""
    found = re.findall(
        r'data-plot="([\w-]+)">\s*<img src="data:image/svg\+xml;base64,([^"]+)"', html
    )
    return {key: base64.b64decode(data).decode() for key, data in found}


def _self_contained(html: str) -> None:
    assert not re.search(r"<(link|script)[^>]+(href|src)=", html)
    assert not re.search(r'src="(?!data:)', html)


def _answer(html: str) -> str:
    """The first-screen part of a page: everything before the long tables."""
    return html.split("<h2>Tables</h2>")[0]


def test_report_renders_the_source_qmax_answer_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [qmax] = _copy(tmp_path, QMAX)
    assert main(["report", str(qmax), "--artifacts-dir", str(tmp_path)]) == 0
    page = tmp_path / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.html"
    assert capsys.readouterr().out.strip() == f"report: {page}"
    html = page.read_text()
    _self_contained(html)
    answer = _answer(html)
    assert '<p class="headline" data-role="headline">Q_max 50</p>' in answer
    assert "bracketed" in answer
    for fact in ("p95 TTFAB ≤ 3000 ms", "speech-kokoro-82m", "g5xlarge-8b1b96bc", "8 of 8"):
        assert fact in answer, fact
    assert "capacity frozen</dt><dd>yes" in answer
    assert "client held N</dt><dd>every rung" in answer
    assert list(_figures(answer)) == ["ladder", "throughput", "ttfab-distribution", "underrun"]
    # The long tables come after the answer.
    assert "Every per-request metric, per rung" in html.split("<h2>Tables</h2>")[1]
    assert 'href="qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"' in answer


def test_report_of_a_plan_recomputes_its_surge_from_the_artifacts_it_names(
    tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib", reason=needs_extra("matplotlib"))
    plan, *_ = _copy(tmp_path, PLAN, QMAX, TTOTAL)
    assert main(["report", str(plan), "--output", str(tmp_path / "out" / "plan.html")]) == 0
    html = (tmp_path / "out" / "plan.html").read_text()
    _self_contained(html)
    answer = _answer(html)
    assert "plan warn" in answer
    for fact in ("37.5 in flight per instance", "30 / 960 s", "1..249 (safe floor 3)"):
        assert fact in answer, fact
    for warned in ("knee", "surge_survival", "scale_in_safety"):
        assert f"{warned}</dt><dd>warn" in answer
    figures = _figures(answer)
    assert list(figures) == ["thresholds", "surge"]
    assert "C_scale_max 37.5" in figures["thresholds"]
    assert "shed by the gate" in figures["surge"]
    assert "recomputing" not in html  # the committed plan is what its inputs give
    assert 'href="../plan-kokoro-82m.json"' in answer
    assert "ModelEndpointConfig" in html


def test_a_plan_alone_is_drawn_from_the_curve_and_policy_it_stored(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason=needs_extra("matplotlib"))
    [plan] = _copy(tmp_path, PLAN)
    assert main(["report", str(plan), "--artifacts-dir", str(tmp_path)]) == 0
    answer = _answer((tmp_path / "plan-kokoro-82m.html").read_text())
    figures = _figures(answer)
    assert list(figures) == ["thresholds", "surge"]
    assert "C_scale_max 37.5" in figures["thresholds"]
    assert "recomputing" not in answer


def test_a_schema_1_plan_alone_is_rendered_without_plots_and_says_what_it_needs(
    tmp_path: Path,
) -> None:
    [plan] = _copy(tmp_path, PLAN)
    old = json.loads(plan.read_text())
    old["schema"] = "tts-scaling/plan/1"
    del old["service_curve"], old["policy"]
    plan.write_text(json.dumps(old, indent=2) + "\n")
    assert main(["report", str(plan), "--artifacts-dir", str(tmp_path)]) == 0
    html = (tmp_path / "plan-kokoro-82m.html").read_text()
    assert _figures(html) == {}
    assert (
        "The simulated surge and the measured curve need the qmax artifact the plan names "
        "(qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json) beside it"
    ) in html


def test_report_of_ttotal_shows_t_total_and_the_waterfall(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason=needs_extra("matplotlib"))
    [ttotal] = _copy(tmp_path, TTOTAL)
    assert main(["report", str(ttotal), "--artifacts-dir", str(tmp_path)]) == 0
    answer = _answer((tmp_path / ttotal.with_suffix(".html").name).read_text())
    assert "T_total 320.2 s" in answer
    assert "dominant stage</dt><dd>instance_logging" in answer
    assert "traffic recovered</dt><dd>yes" in answer
    figures = _figures(answer)
    assert list(figures) == ["waterfall"]
    # The source artifact holds only the stages' times: they are timed as ttotal times them.
    assert "181.0 s (logs:firstEventTimestamp)" in figures["waterfall"]
    assert "<td>181.0</td>" in (tmp_path / ttotal.with_suffix(".html").name).read_text()


def test_several_artifacts_give_a_page_each_and_one_page_of_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _copy(tmp_path, QMAX, TTOTAL, PLAN)
    index = tmp_path / "index.html"
    assert main(["report", *map(str, paths), "--output", str(index)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"report: {index}"
    assert len(out) == 4
    html = index.read_text()
    headlines = re.findall(r'data-role="headline">([^<]+)<', html)
    assert headlines == ["Q_max 50", "T_total 320.2 s", "plan warn"]
    for path in paths:
        assert f'href="{path.with_suffix(".html").name}"' in html
        assert path.with_suffix(".html").is_file()


def test_every_plot_of_the_development_model_names_it() -> None:
    pytest.importorskip("matplotlib", reason=needs_extra("matplotlib"))
    local = view_for(load_shown(LOCAL_QMAX))
    assert local.figures
    for figure in local.figures:
        assert DEV_MODEL_LABEL in figure.svg, figure.key
    assert any("untrained Kokoro-82M" in note for note in local.notes)
    for figure in view_for(load_shown(QMAX)).figures:
        assert DEV_MODEL_LABEL not in figure.svg, figure.key


def test_a_plot_is_the_same_bytes_each_time() -> None:
    artifact = load_shown(QMAX).artifact
    assert ladder_svg(artifact) == ladder_svg(artifact)  # type: ignore[arg-type]


def test_optional_fields_may_be_missing(tmp_path: Path) -> None:
    """Older artifacts lack the artifact format's optional fields: they still render."""
    data = json.loads(QMAX.read_text())
    minimum = {
        "concurrency", "usable", "unusable_reason", "meets_slo", "completed", "rejected",
        "measure_s", "throughput_rps", "concurrency_mean", "ttfab_ms", "latency_ms", "cw_ratio",
    }  # fmt: skip
    data["rungs"] = [{k: v for k, v in r.items() if k in minimum} for r in data["rungs"]]
    path = tmp_path / QMAX.name
    path.write_text(json.dumps(data))
    assert main(["report", str(path), "--artifacts-dir", str(tmp_path)]) == 0
    answer = _answer(path.with_suffix(".html").read_text())
    assert "Q_max 50" in answer
    assert len(_figures(answer)) == 4


def test_a_run_that_measured_no_rung_says_so_without_empty_plots(tmp_path: Path) -> None:
    data = json.loads(QMAX.read_text())
    data |= {"rungs": [], "q_max": None, "q_max_bracketed": False, "complete": False}
    data["stop_reason"] = "endpoint_unavailable"
    path = tmp_path / QMAX.name
    path.write_text(json.dumps(data))
    assert main(["report", str(path), "--artifacts-dir", str(tmp_path)]) == 0
    answer = _answer(path.with_suffix(".html").read_text())
    assert "Q_max not found" in answer
    assert "no rung measured" in answer
    assert "run complete</dt><dd>no (endpoint_unavailable)" in answer
    assert _figures(answer) == {}


def test_a_bad_artifact_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"schema": "tts-scaling/other/1"}))
    assert main(["report", str(path), "--artifacts-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "field 'schema': expected one of tts-scaling/qmax/1" in err
    assert main(["report", str(tmp_path / "missing.json"), "--artifacts-dir", str(tmp_path)]) == 2
    assert "no such artifact file" in capsys.readouterr().err


def test_no_module_builds_html_in_an_f_string() -> None:
    """One rendering path: HTML comes from the Jinja templates only."""
    package = ROOT / "pytest_tts_scaling"
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in package.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"""\bf["'][^"']*<(/?)(p|b|h\d|div|table|tr|td|th|span|a|img)\b""", line)
    ]
    assert offenders == []
