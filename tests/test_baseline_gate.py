"""`--baseline` end to end, and the promotion gate as one pytest command.

The qmax runs measure the serial calibration server (one request at a time, 100 ms each, first
audio after 50 ms): at a 200 ms SLO rungs 1 and 2 pass (50 and 150 ms) and rung 3 fails (250 ms),
so Q_max is 2, bracketed, in three short rungs.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.cli import main
from tests.factories import pytest_args

NO_CACHE = ("-p", "no:cacheprovider")
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "reports" / "examples" / "source"
QMAX_EXAMPLE = EXAMPLES / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
TTOTAL_EXAMPLE = EXAMPLES / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"
SHORT_LADDER = ("--ladder", "1,2,3", "--hold-s", "2", "--measure-s", "1.5", "--gap-s", "0")
SLO = ("--slo-ms", "200")
LOADED_MACHINE = ("--regression-tolerance", "2")


def qmax_args(server: SerialStreamServer, out: Path, *extra: str) -> list[str]:
    return [
        *NO_CACHE,
        "-m",
        "qmax",
        "--endpoint-url",
        server.base_url,
        *pytest_args(*SHORT_LADDER, *SLO, "--min-qmax", "2", "--artifacts-dir", str(out), *extra),
    ]


def only_artifact(directory: Path) -> Path:
    [path] = directory.glob("qmax-kokoro-82m-response-stream-url-*.json")
    return path


def edited(source: Path, target: Path, **fields: object) -> Path:
    data = json.loads(source.read_text())
    data.update(fields)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data))
    return target


def test_a_second_run_passes_against_the_first_and_a_higher_qmax_fails(
    pytester: pytest.Pytester, qmax_scenario: Path, serial_server: SerialStreamServer
) -> None:
    first = pytester.runpytest(*qmax_args(serial_server, pytester.path / "first"))
    first.assert_outcomes(passed=3, skipped=1)  # the baseline test skips without --baseline
    baseline = only_artifact(pytester.path / "first")
    assert json.loads(baseline.read_text())["q_max"] == 2

    # Client and server share this machine's two busy cores (and one GIL): between-run drift
    # here exceeds the within-run intervals, which is what the tolerance is for.
    report = pytester.path / "again.html"
    again = pytester.runpytest(
        *qmax_args(serial_server, pytester.path / "again", *LOADED_MACHINE),
        f"--tts-baseline={baseline}",
        "--html",
        str(report),
        "--self-contained-html",
    )
    again.assert_outcomes(passed=4)
    again.stdout.fnmatch_lines(["*qmax baseline: compare: no regression: * check(s)*"])
    html = report.read_text()
    # Rungs of 1.5 s hold about 30 requests: too few to bound a p95 from above, so their p95
    # checks are skipped, saying why, and Q_max is what is held against the baseline.
    assert "p95 interval is open above (too few requests to bound it)" in html
    assert "ladder against the baseline" in html
    assert "regression checks" in html
    assert "No regression" in html

    # The committed baseline edited to a higher Q_max, in the directory the run writes to: the
    # baseline is read before the ladder overwrites the file, and the gate names Q_max.
    gate_dir = pytester.path / "gate"
    higher = edited(baseline, gate_dir / baseline.name, q_max=5)
    report = pytester.path / "gate.html"
    failed = pytester.runpytest(
        *qmax_args(serial_server, gate_dir, *LOADED_MACHINE),
        f"--tts-baseline={higher}",
        "--html",
        str(report),
        "--self-contained-html",
    )
    failed.assert_outcomes(passed=3, failed=1)
    assert failed.ret == pytest.ExitCode.TESTS_FAILED
    failed.stdout.fnmatch_lines(
        [
            "*_ test_qmax_no_regression_against_baseline _*",
            "REGRESSION q_max: baseline 5, new 2, threshold >= 5 (the new ladder found Q_max 2 "
            "below the baseline's 5: rung N=3 had p95 TTFAB * ms > SLO 200 ms)",
            "qmax baseline: compare: REGRESSION in 1 of * check(s) (q_max)*",
            "FAILED test_qmax.py::test_qmax_no_regression_against_baseline*",
        ]
    )
    assert json.loads(higher.read_text())["q_max"] == 2  # the new artifact replaced it
    html = report.read_text()
    assert "REGRESSION" in html
    assert "background: #fdd" in html


def test_a_baseline_of_another_configuration_is_refused_naming_the_field(
    pytester: pytest.Pytester, qmax_scenario: Path, serial_server: SerialStreamServer
) -> None:
    transport = edited(QMAX_EXAMPLE, pytester.path / "bidi.json", transport="bidi", slo_ms=200.0)
    refused = pytester.runpytest(
        *qmax_args(serial_server, pytester.path / "out"), f"--tts-baseline={transport}"
    )
    # Refused before anything is measured: every qmax test errors at setup, no artifact exists.
    refused.assert_outcomes(errors=4)
    refused.stdout.fnmatch_lines(
        [
            "*--tts-baseline refused: field 'transport': baseline * has 'bidi', this run has "
            "'response-stream': expected the same transport*--allow-config-mismatch*"
        ]
    )
    assert not (pytester.path / "out").exists()

    # Same model, transport and SLO but another fingerprint: refused once the endpoint is open,
    # still before the ladder.
    other = edited(QMAX_EXAMPLE, pytester.path / "other.json", slo_ms=200.0)
    mismatched = pytester.runpytest(
        *qmax_args(serial_server, pytester.path / "out"), f"--tts-baseline={other}"
    )
    mismatched.assert_outcomes(errors=4)
    mismatched.stdout.fnmatch_lines(
        [
            "*--tts-baseline refused: field 'slug': baseline * has 'g5xlarge-8b1b96bc', endpoint "
            f"{serial_server.base_url} has 'url-*'*"
        ]
    )
    assert not (pytester.path / "out").exists()
    # With --allow-config-mismatch it is measured and compared, with a warning.
    accepted = pytester.runpytest(
        *qmax_args(serial_server, pytester.path / "out"),
        f"--tts-baseline={other}",
        "--tts-allow-config-mismatch",
    )
    accepted.assert_outcomes(passed=3, failed=1)
    accepted.stdout.fnmatch_lines(
        [
            "*qmax baseline: warning: field 'slug'*accepted by --tts-allow-config-mismatch*",
            "*qmax baseline: REGRESSION q_max: baseline 50, new 2, threshold >= 50*",
        ]
    )


def test_tts_bench_qmax_with_a_baseline_exits_by_the_comparison(
    tmp_path: Path, serial_server: SerialStreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--endpoint-url", serial_server.base_url, *SHORT_LADDER, *SLO]
    assert main(["qmax", *common, "--artifacts-dir", str(tmp_path / "a")]) == 0
    baseline = only_artifact(tmp_path / "a")
    capsys.readouterr()

    higher = edited(baseline, tmp_path / "higher.json", q_max=3)
    code = main(
        [
            "qmax",
            *common,
            *LOADED_MACHINE,
            "--artifacts-dir",
            str(tmp_path / "b"),
            "--baseline",
            str(higher),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert "REGRESSION q_max: baseline 3, new 2, threshold >= 3" in out
    assert "compare: REGRESSION in 1 of " in out
    assert "check(s) (q_max)" in out
    # `tts-bench compare` says the same offline.
    new = only_artifact(tmp_path / "b")
    assert main(["compare", str(higher), str(new), *LOADED_MACHINE]) == 1
    assert "REGRESSION q_max: baseline 3, new 2, threshold >= 3" in capsys.readouterr().out

    # A baseline of another fingerprint exits 2 before the ladder starts.
    other = edited(baseline, tmp_path / "other.json", slug="g5xlarge-8b1b96bc")
    code = main(["qmax", *common, "--artifacts-dir", str(tmp_path / "c"), "--baseline", str(other)])
    assert code == 2
    err = capsys.readouterr().err
    assert "error: field 'slug'" in err
    assert not (tmp_path / "c").exists()


# --- the promotion gate -----------------------------------------------------------------------


def junit_cases(path: Path) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    for case in ET.parse(path).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[case.get("name", "")] = "failed"
        elif case.find("skipped") is not None:
            outcomes[case.get("name", "")] = "skipped"
        else:
            outcomes[case.get("name", "")] = "passed"
    return outcomes


@pytest.fixture
def gate_scenarios(pytester: pytest.Pytester) -> Path:
    """The real drift, plan and validate scenarios, and a qmax one the gate must leave out."""
    # Module names of their own: this session has imported tests' test_plan, test_drift, ….
    for name in ("drift", "plan", "validate", "qmax"):
        shutil.copy(ROOT / "scenarios" / f"test_{name}.py", pytester.path / f"test_gate_{name}.py")
    return pytester.path


def test_promotion_gate_runs_every_check_and_fails_without_an_endpoint(
    pytester: pytest.Pytester, gate_scenarios: Path
) -> None:
    """Offline: plan passes from the committed artifacts; drift and validate, given no endpoint,
    fail each of their named checks, so the one command exits non-zero."""
    junit = pytester.path / "promotion.xml"
    result = pytester.runpytest(
        *NO_CACHE,
        "-m",
        "drift or plan or validate",
        f"--tts-qmax-artifact={QMAX_EXAMPLE}",
        f"--tts-ttotal-artifact={TTOTAL_EXAMPLE}",
        "--tts-peak-rps",
        "5000",
        "--tts-trough-rps",
        "10",
        f"--tts-plan-artifact={EXAMPLES / 'plan-kokoro-82m.json'}",
        f"--tts-artifacts-dir={pytester.path / 'out'}",
        f"--junitxml={junit}",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    cases = junit_cases(junit)
    assert cases.pop("test_plan_has_no_stop_findings") == "passed"
    assert not any("qmax" in name for name in cases)
    drift = {n for n in cases if n.startswith("test_drift[")}
    validate = {n for n in cases if n.startswith("test_validate[")}
    assert drift
    assert validate
    assert set(cases) == drift | validate
    assert set(cases.values()) == {"failed"}
    result.stdout.fnmatch_lines(["*drift checks a deployed SageMaker endpoint: pass --endpoint*"])


def test_promotion_gate_fails_on_a_plan_stop(
    pytester: pytest.Pytester, gate_scenarios: Path
) -> None:
    # An SLO that does not fit SageMaker's 60 s invocation limit: the plan's verdict is stop.
    stop = edited(QMAX_EXAMPLE, pytester.path / "qmax-stop.json", slo_ms=59990.0)
    junit = pytester.path / "plan.xml"
    result = pytester.runpytest(
        *NO_CACHE,
        "-m",
        "drift or plan or validate",
        f"--tts-qmax-artifact={stop}",
        f"--tts-ttotal-artifact={TTOTAL_EXAMPLE}",
        "--tts-peak-rps",
        "5000",
        f"--tts-artifacts-dir={pytester.path / 'out'}",
        f"--junitxml={junit}",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert junit_cases(junit)["test_plan_has_no_stop_findings"] == "failed"
    result.stdout.fnmatch_lines(["*plan verdict stop: invocation_ceiling*"])
