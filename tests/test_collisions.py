"""Runs never silently replace an earlier output: plan (CLI, scenario) and the pytest-html report.

An earlier, different file is moved aside with its UTC modification time in the name and the run
says so in one line; the same bytes written again (a reproduced plan) stay where they are.
ttotal's artifact goes through the same call (tests/aws/test_aws_scaleout.py end to end).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_tts_scaling.cli import main

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "reports" / "examples" / "source"
QMAX = SOURCE / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
TTOTAL = SOURCE / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"
PLAN_ARGS = ["--qmax-artifact", str(QMAX), "--ttotal-artifact", str(TTOTAL), "--trough-rps", "10"]
STAMPED = r"\d{8}T\d{6}Z"


def test_plan_cli_keeps_a_different_earlier_plan_and_leaves_the_same_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--artifacts-dir", str(tmp_path)]
    plan = tmp_path / "plan-kokoro-82m.json"
    assert main(["plan", *PLAN_ARGS, "--peak-rps", "5000", *where]) == 0
    first = plan.read_bytes()
    assert main(["plan", *PLAN_ARGS, "--peak-rps", "5000", *where]) == 0
    out = capsys.readouterr().out
    assert "kept the earlier" not in out
    assert [p.name for p in tmp_path.iterdir()] == [plan.name]

    assert main(["plan", *PLAN_ARGS, "--peak-rps", "2500", *where]) == 0
    out = capsys.readouterr().out
    [kept] = [p for p in tmp_path.iterdir() if p != plan]
    assert re.fullmatch(rf"plan-kokoro-82m\.{STAMPED}\.json", kept.name)
    assert kept.read_bytes() == first
    assert plan.read_bytes() != first
    assert f"plan: kept the earlier {plan} as {kept.name}\n" in out


def test_plan_scenario_keeps_a_different_earlier_plan_and_says_so(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_plan_scenario=(ROOT / "scenarios" / "test_plan.py").read_text())
    out = pytester.path / "out"
    out.mkdir()
    (out / "plan-kokoro-82m.json").write_text("{}\n")
    args = [
        *("-p", "no:cacheprovider", "-p", "no:html", "-m", "plan"),
        *(f"--tts-qmax-artifact={QMAX}", f"--tts-ttotal-artifact={TTOTAL}"),
        *("--tts-peak-rps", "5000", "--tts-trough-rps", "10", f"--tts-artifacts-dir={out}"),
    ]
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    [kept] = [p for p in out.iterdir() if p.name != "plan-kokoro-82m.json"]
    assert kept.read_text() == "{}\n"
    result.stdout.fnmatch_lines([f"plan: kept the earlier {out / 'plan-kokoro-82m.json'} as *"])

    again = pytester.runpytest(*args)
    again.assert_outcomes(passed=1)
    assert "kept the earlier" not in again.stdout.str()
    assert len(list(out.iterdir())) == 2


def test_an_earlier_html_report_is_kept_aside_by_a_measuring_run_and_the_summary_says_so(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_one="def test_one():\n    pass\n",
        test_step="import pytest\n\n@pytest.mark.plan\ndef test_step(tts_options):\n    pass\n",
    )
    report = pytester.path / "reports" / "report.html"
    args = ["-p", "no:cacheprovider", "--html", "reports/report.html", "--self-contained-html"]
    pytester.runpytest(*args).assert_outcomes(passed=1, deselected=1)
    first = report.read_text()
    assert "test_one" in first

    # A run that measures nothing writes over its own report as pytest-html always does.
    pytester.runpytest(*args).assert_outcomes(passed=1, deselected=1)
    assert list(report.parent.iterdir()) == [report]
    first = report.read_text()

    result = pytester.runpytest(*args, "-m", "plan")
    result.assert_outcomes(passed=1, deselected=1)
    [kept] = [p for p in report.parent.iterdir() if p != report]
    assert re.fullmatch(rf"report\.{STAMPED}\.html", kept.name)
    assert kept.read_text() == first
    assert report.is_file()
    result.stdout.fnmatch_lines(
        ["*tts-scaling*", f"html: kept the earlier {Path('reports/report.html')} as {kept.name}"]
    )


def test_a_run_without_an_earlier_report_says_nothing_of_keeping(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--html", "report.html")
    result.assert_outcomes(passed=1)
    assert "kept the earlier" not in result.stdout.str()
