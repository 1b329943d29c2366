"""The plugin's side of the report: `pytest -m plan --html …` puts the plan on the first screen,
writes its page beside the report, and `--export-csv` writes its findings."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "reports" / "examples" / "source"
QMAX = SOURCE / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
TTOTAL = SOURCE / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"


def test_plan_run_shows_its_answer_first_and_writes_its_page_and_csv(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_plan_scenario=(ROOT / "scenarios" / "test_plan.py").read_text())
    out = pytester.path / "out"
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-m",
        "plan",
        *(f"--tts-qmax-artifact={QMAX}", f"--tts-ttotal-artifact={TTOTAL}"),
        *("--tts-peak-rps", "5000", "--tts-trough-rps", "10", f"--tts-artifacts-dir={out}"),
        *("--html", str(out / "report.html"), "--self-contained-html"),
        f"--tts-export-csv={out / 'csv'}",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"csv: {out / 'csv' / 'plan-kokoro-82m.findings.csv'}"])
    report = (out / "report.html").read_text()
    answer, rows = report.split('id="results-table"')
    assert re.findall(r'data-role="headline">([^<]+)<', answer) == ["plan warn"]
    assert re.findall(r'data-plot="([\w-]+)"', answer) == ["thresholds", "surge"]
    assert 'href="plan-kokoro-82m.html"' in answer
    # The findings table stays in the test's row, below; the row links the page.
    assert "plan findings and ModelEndpointConfig" in report
    assert "plan-kokoro-82m.html" in rows
    page = (out / "plan-kokoro-82m.html").read_text()
    assert re.findall(r'data-plot="([\w-]+)"', page) == ["thresholds", "surge"]
    assert 'href="plan-kokoro-82m.json"' in page
    with (out / "csv" / "plan-kokoro-82m.findings.csv").open() as handle:
        names = [row["name"] for row in csv.DictReader(handle)]
    assert "surge_survival" in names


def test_export_csv_without_a_report_needs_no_pytest_html(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plan_scenario=(ROOT / "scenarios" / "test_plan.py").read_text())
    out = pytester.path / "out"
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:html",
        "-m",
        "plan",
        *(f"--tts-qmax-artifact={QMAX}", f"--tts-ttotal-artifact={TTOTAL}"),
        *("--tts-peak-rps", "5000", f"--tts-artifacts-dir={out}", f"--tts-export-csv={out}"),
    )
    result.assert_outcomes(passed=1)
    assert (out / "plan-kokoro-82m.findings.csv").is_file()
    assert not list(out.glob("*.html"))
