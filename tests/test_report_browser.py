"""The report as a person opens it: headless Chromium at 1400 x 900, no scroll, no click.

A real `pytest -m qmax` run against the calibration server writes the pytest-html report, the
pages and the CSV; Chromium (Debian's, driven by Playwright) measures where Q_max and the
ladder plot lie. Set TTS_SCREENSHOTS=DIR to keep the screenshots.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.cli import main
from pytest_tts_scaling.report.browser import FirstScreen, chromium_available, first_screen

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "reports" / "examples" / "source"

if not chromium_available():
    if os.environ.get("CI"):
        pytest.fail("CI needs Chromium at /usr/bin/chromium: .ci/run installs it", pytrace=False)
    pytest.skip(
        "no Chromium at /usr/bin/chromium: apt-get install chromium", allow_module_level=True
    )


def _shot(tmp: Path, name: str) -> Path:
    keep = os.environ.get("TTS_SCREENSHOTS")
    return (Path(keep) if keep else tmp) / name


@pytest.fixture(scope="module")
def qmax_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pytest -m qmax --html … --export-csv …` on a server whose true Q_max is 5 at 500 ms."""
    out = tmp_path_factory.mktemp("qmax")
    with SerialStreamServer(service_s=0.1, first_audio_s=0.05) as server:
        assert server.true_qmax(500) == 5
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-m",
                "qmax",
                str(ROOT / "scenarios" / "test_qmax.py"),
                "--endpoint-url",
                server.base_url,
                *("--tts-ladder", "1,2,4,6,8", "--tts-hold-s", "3", "--tts-measure-s", "2"),
                *("--tts-gap-s", "0", "--tts-slo-ms", "500"),
                f"--tts-artifacts-dir={out / 'artifacts'}",
                *("--html", str(out / "report.html"), "--self-contained-html"),
                f"--tts-export-csv={out / 'csv'}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return out


def _answer_in_view(screen: FirstScreen, headline: str, plot: str) -> None:
    assert screen.scroll_y == 0
    [(text, box)] = [(t, b) for t, b in screen.headlines if t.startswith(headline)]
    assert screen.visible(box), f"{text!r} lies at {box}, outside {screen.viewport}"
    shown = screen.plot(plot)
    assert shown.loaded, f"the {plot} plot did not decode"
    assert screen.visible(shown.box), f"the {plot} plot lies at {shown.box}"
    assert shown.box.width >= 0.8 * screen.viewport[0], f"the {plot} plot is not full width"


def test_first_screen_of_the_pytest_html_report_shows_qmax_and_the_ladder(
    qmax_report: Path, tmp_path: Path
) -> None:
    screen = first_screen(qmax_report / "report.html", _shot(tmp_path, "qmax-report.png"))
    [(text, _)] = screen.headlines
    assert text.startswith("Q_max ")
    _answer_in_view(screen, "Q_max", "ladder")
    assert [p.key for p in screen.plots] == [
        "ladder",
        "throughput",
        "ttfab-distribution",
        "underrun",
        "listener",
    ]
    assert all(p.loaded for p in screen.plots)
    # Self-contained: the browser fetched nothing but the report itself.
    assert screen.requests == [(qmax_report / "report.html").resolve().as_uri()]


def test_the_report_links_a_self_contained_page_per_artifact(qmax_report: Path) -> None:
    [artifact] = (qmax_report / "artifacts").glob("qmax-*.json")
    page = qmax_report / artifact.with_suffix(".html").name
    html = (qmax_report / "report.html").read_text()
    assert f'href="{page.name}"' in html
    assert f'href="artifacts/{artifact.name}"' in html
    screen = first_screen(page)
    _answer_in_view(screen, "Q_max", "ladder")
    assert screen.requests == [page.resolve().as_uri()]
    q_max = json.loads(artifact.read_text())["q_max"]
    assert [t for t, _ in screen.headlines] == [f"Q_max {q_max}"]


def test_export_csv_option_writes_rungs_and_every_request(qmax_report: Path) -> None:
    [artifact_path] = (qmax_report / "artifacts").glob("qmax-*.json")
    artifact = json.loads(artifact_path.read_text())
    stem = artifact_path.stem
    with (qmax_report / "csv" / f"{stem}.rungs.csv").open() as handle:
        rungs = list(csv.DictReader(handle))
    assert [int(r["concurrency"]) for r in rungs] == [r["concurrency"] for r in artifact["rungs"]]
    assert [float(r["ttfab_ms.p95"]) for r in rungs] == [
        r["ttfab_ms"]["p95"] for r in artifact["rungs"]
    ]
    with (qmax_report / "csv" / f"{stem}.requests.csv").open() as handle:
        requests = list(csv.DictReader(handle))
    records = (artifact_path.parent / artifact["records_file"]).read_text().splitlines()
    assert len(requests) == len(records) >= sum(r["completed"] for r in artifact["rungs"])
    assert all(r["input.text"] for r in requests)


def test_source_example_plan_opens_on_its_verdict_and_thresholds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (
        "plan-kokoro-82m.json",
        "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json",
        "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json",
    ):
        shutil.copy(SOURCE / name, tmp_path / name)
    shot = _shot(tmp_path, "source-plan.png")
    plan = str(tmp_path / "plan-kokoro-82m.json")
    assert main(["report", plan, "--artifacts-dir", str(tmp_path), "--screenshot", str(shot)]) == 0
    assert "first screen shows plan warn; plots thresholds" in capsys.readouterr().out
    screen = first_screen(tmp_path / "plan-kokoro-82m.html")
    _answer_in_view(screen, "plan warn", "thresholds")
    assert [p.key for p in screen.plots] == ["thresholds", "surge"]
    assert shot.stat().st_size > 10_000
