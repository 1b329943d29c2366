"""Under pytest a failure reads as one line, the words `tts-bench` prints, once per session.

Each path counts the lines that carry the message: the failure's body, the tts-scaling summary
and pytest's short summary, and no more; the other scenarios that needed the same measurement
say "see above" in one line each; no traceback and no repr of the plugin's objects.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from tests.factories import EXAMPLES, QUICK_RUNGS

ROOT = Path(__file__).resolve().parents[1]
TTOTAL_EXAMPLE = EXAMPLES / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"
QUICK = ("-p", "no:cacheprovider", *QUICK_RUNGS)


def lines_with(result: pytest.RunResult, text: str) -> list[str]:
    return [line for line in result.outlines if text in line]


def assert_no_insides(result: pytest.RunResult) -> None:
    text = result.stdout.str()
    insides = ("Traceback", "LadderResult(", "QmaxArtifact(", "pytest_tts_scaling/", "    def ")
    for inside in insides:
        assert inside not in text, inside


def assert_once(result: pytest.RunResult, message: str, tests: int) -> None:
    """The message in the failure's body and the tts-scaling section; one short-summary line per
    test, the first with the message, the rest "see above"."""
    summary = [x for x in result.outlines if x.startswith(("ERROR ", "FAILED "))]
    assert len(summary) == tests, summary
    body = [x for x in lines_with(result, message) if x not in summary]
    assert len(body) == 2, body
    section = result.outlines.index(next(x for x in result.outlines if "= tts-scaling =" in x))
    assert body[1] in result.outlines[section:]
    assert all("not run: see" in x for x in summary[1:])
    later = [x for x in result.outlines if x.startswith("not run: see the failure of")]
    assert len(later) == tests - 1
    assert_no_insides(result)


def test_a_dead_endpoint(pytester: pytest.Pytester, qmax_scenario: Path) -> None:
    result = pytester.runpytest(
        "-m", "qmax", "--endpoint-url", "http://127.0.0.1:9", *QUICK, "--tts-artifacts-dir", "out"
    )
    result.assert_outcomes(errors=4)
    assert_once(result, "qmax: error: endpoint http://127.0.0.1:9 does not answer: connection", 4)
    assert not (pytester.path / "out").exists()


def test_a_refused_input(
    pytester: pytest.Pytester, qmax_scenario: Path, serial_server: SerialStreamServer
) -> None:
    ttotal = pytester.path / "ttotal.json"
    ttotal.write_text(TTOTAL_EXAMPLE.read_text())
    result = pytester.runpytest(
        "-m",
        "qmax",
        "--endpoint-url",
        serial_server.base_url,
        *QUICK,
        f"--tts-baseline={ttotal}",
    )
    result.assert_outcomes(errors=4)
    assert_once(result, "qmax: --tts-baseline refused: ", 4)


def test_a_missing_artifact(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plan=(ROOT / "scenarios" / "test_plan.py").read_text())
    result = pytester.runpytest(
        *QUICK,
        "-m",
        "plan",
        *("--tts-qmax-artifact", "nothere.json", f"--tts-ttotal-artifact={TTOTAL_EXAMPLE}"),
        *("--tts-peak-rps", "100", "--tts-artifacts-dir", "out"),
    )
    result.assert_outcomes(failed=1)
    assert_once(result, "plan: error: ", 1)
    assert lines_with(result, "nothere.json")


def test_no_rung_met_the_slo(pytester: pytest.Pytester, qmax_scenario: Path) -> None:
    with SerialStreamServer(service_s=0.05, first_audio_s=0.03) as server:
        result = pytester.runpytest(
            "-m",
            "qmax",
            *("--endpoint-url", server.base_url, "--tts-ladder", "1", "--tts-slo-ms", "10"),
            *QUICK,
            *("--tts-artifacts-dir", "out"),
        )
    result.assert_outcomes(failed=1, skipped=3)
    assert_once(result, "qmax: FAIL: no rung met p95 TTFAB <= 10 ms; lowest rung N=1", 1)
