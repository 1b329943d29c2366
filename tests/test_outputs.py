"""Outputs go where outputs go: pages and screenshots into the artifacts directory, never beside
a committed example or into the working directory; a dry run writes no report and moves none."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_tts_scaling.cli import main

ROOT = Path(__file__).resolve().parents[1]
QMAX = (
    ROOT
    / "reports"
    / "examples"
    / "source"
    / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def test_a_page_of_a_committed_example_goes_to_the_artifacts_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = tmp_path / "examples"
    examples.mkdir()
    shutil.copy(QMAX, examples)
    before = snapshot(examples)
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(examples / QMAX.name)]) == 0
    assert snapshot(examples) == before
    assert (tmp_path / "reports" / QMAX.with_suffix(".html").name).is_file()


def test_a_bare_screenshot_name_goes_beside_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[Path] = []

    @dataclass
    class Screen:
        viewport: tuple[int, int] = (1400, 900)
        headlines: tuple[()] = ()
        plots: tuple[()] = ()

        def visible(self, box: object) -> bool:
            return True

    def first_screen(page: Path, png: Path) -> Screen:
        taken.append(png)
        return Screen()

    monkeypatch.setattr("pytest_tts_scaling.report.browser.first_screen", first_screen)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert main(["report", str(QMAX), "--artifacts-dir", str(out), "--screenshot", "shot.png"]) == 0
    assert taken == [out / "shot.png"]
    assert main(["report", str(QMAX), "--artifacts-dir", str(out), "--screenshot", "x/y.png"]) == 0
    assert taken[-1] == Path("x/y.png")  # a path the user spelled is kept as spelled


def test_a_dry_run_leaves_the_reports_dir_byte_for_byte(
    pytester: pytest.Pytester, qmax_scenario: Path
) -> None:
    reports = pytester.path / "reports"
    reports.mkdir()
    (reports / "qmax-report.html").write_text("<html>the last real run</html>")
    (reports / "qmax-kokoro-82m-response-stream-url-1.json").write_text("{}")
    before = snapshot(reports)
    result = pytester.runpytest(
        *("-p", "no:cacheprovider", "-m", "qmax", "--tts-dry-run"),
        *("--endpoint-url", "http://127.0.0.1:9", f"--tts-artifacts-dir={reports}"),
        *("--html", str(reports / "qmax-report.html"), "--self-contained-html"),
    )
    result.assert_outcomes(skipped=4)
    assert snapshot(reports) == before
    result.stdout.fnmatch_lines(
        ["html: dry run: no report written, *qmax-report.html left as it was"]
    )
