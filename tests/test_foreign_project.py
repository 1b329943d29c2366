"""The plugin in other people's projects: it measures from any of them, and a suite that does not
use it runs exactly as it would without it installed.

Each project is a pytester directory with no scenarios of its own: the steps it runs are the
packaged ones (`pytest_tts_scaling.scenarios`).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer

ROOT = Path(__file__).resolve().parents[1]
NO_CACHE = ("-p", "no:cacheprovider")
WITHOUT_PLUGIN = ("-p", "no:tts_scaling")

# A suite of its own: markers that share the plugin's step names, options that share the bare
# names the plugin once took, and its own HTML report.
FOREIGN_INI = """\
[pytest]
markers =
    validate: this project's own input validation tests
    plan: this project's own planner tests
    drift: this project's own clock drift tests
"""
FOREIGN_CONFTEST = """\
def pytest_addoption(parser):
    parser.addoption("--dry-run", action="store_true")
    parser.addoption("--model", default="small")
    parser.addoption("--runs", type=int, default=1)
    parser.addoption("--force", action="store_true")
    parser.addoption("--baseline", default=None)
"""
FOREIGN_TESTS = """\
import pytest

@pytest.mark.validate
def test_rejects_empty(request):
    assert request.config.getoption("--model") == "small"

@pytest.mark.plan
def test_plans(request):
    assert request.config.getoption("--runs") == 1

@pytest.mark.drift
def test_drift_fails():
    assert False, "this project's own failure"

def test_plain():
    pass
"""


@pytest.fixture
def foreign(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(FOREIGN_INI)
    pytester.makeconftest(FOREIGN_CONFTEST)
    pytester.makepyfile(test_theirs=FOREIGN_TESTS)
    return pytester


def listing(folder: Path) -> dict[str, bytes]:
    """The project's files (the report's contents aside: it holds timestamps), without what
    pytester keeps beside them (the subprocess's stdout and stderr, its basetemp)."""
    ours = ("stdout", "stderr", "__pycache__")
    return {
        str(p.relative_to(folder)): b"" if p.suffix == ".html" else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
        and not any(part in ours or part.startswith("runpytest-") for part in p.parts)
    }


def words_of(result: pytest.RunResult) -> list[str]:
    """The run's words about the tests: every line but the header's version and plugin list and
    the timing."""
    header = ("platform ", "plugins: ", "rootdir: ", "cachedir: ", "configfile: ")
    return [
        re.sub(r" in \d+\.\d+s", "", line)
        for line in result.outlines
        if not line.startswith(header) and "Generated html report" not in line
    ]


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("-m", "validate"),
        ("-m", "validate or plan or drift"),
        ("--collect-only", "-q"),
        ("--model", "small", "--runs", "1", "--dry-run", "--force"),
        ("--html", "report.html", "--self-contained-html"),
    ],
    ids=["plain", "own-validate", "own-steps", "collect", "own-options", "own-html"],
)
def test_a_suite_that_does_not_use_the_plugin_runs_as_without_it(
    foreign: pytest.Pytester, args: tuple[str, ...]
) -> None:
    """Same output, exit status, collection and files with the plugin installed and without it,
    an earlier report.html included (left to pytest-html to write over, as without the plugin)."""
    runs = {}
    for name, extra in (("with", ()), ("without", WITHOUT_PLUGIN)):
        (foreign.path / "report.html").write_text("the earlier report\n")
        result = foreign.runpytest_subprocess(*NO_CACHE, *extra, *args)
        runs[name] = (result.ret, words_of(result), listing(foreign.path))
        html = sorted(p.name for p in foreign.path.glob("*.html"))
        assert html == ["report.html"], html
    assert runs["with"] == runs["without"]


def test_a_step_runs_in_a_project_without_scenarios_and_finds_the_known_qmax(
    pytester: pytest.Pytester,
) -> None:
    """`pytest -m qmax --endpoint-url URL` in an empty project: the packaged step, artifacts in
    the project's reports/. One request at a time, 100 ms each, first audio after 50 ms: at a
    200 ms SLO rungs 1 and 2 pass and 3 fails, so Q_max is 2."""
    pytester.makepyfile(test_theirs="def test_plain():\n    pass\n")
    with SerialStreamServer(service_s=0.1, first_audio_s=0.05) as server:
        result = pytester.runpytest_subprocess(
            *NO_CACHE,
            *("-m", "qmax", "--endpoint-url", server.base_url),
            *("--tts-ladder", "1,2,3", "--tts-hold-s", "2", "--tts-measure-s", "1.5"),
            *("--tts-gap-s", "0", "--tts-slo-ms", "200", "-v"),
        )
    result.stdout.fnmatch_lines(
        ["pytest_tts_scaling/scenarios/test_qmax.py::test_qmax_found PASSED*"]
    )
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 2
    assert outcomes["deselected"] == 1  # the project's own test_plain
    [artifact] = (pytester.path / "reports").glob("qmax-kokoro-82m-response-stream-url-*.json")
    assert json.loads(artifact.read_text())["q_max"] == 2


def test_a_step_in_a_project_with_its_own_scenarios_collects_only_that_file(
    pytester: pytest.Pytester,
) -> None:
    """This repository's layout: `pytest -m qmax` collects scenarios/test_qmax.py, not the suite."""
    pytester.mkdir("scenarios")
    shutil.copy(ROOT / "scenarios" / "test_qmax.py", pytester.path / "scenarios" / "test_qmax.py")
    pytester.makepyfile(test_other="def test_one():\n    pass\n")
    result = pytester.runpytest(*NO_CACHE, "-m", "qmax", "--collect-only", "-q")
    collected = [line for line in result.outlines if "::" in line]
    assert collected
    assert all(line.startswith("scenarios/test_qmax.py::") for line in collected), collected
    # A path named on the command line is collected as named.
    named = pytester.runpytest(*NO_CACHE, "-m", "qmax", "--collect-only", "-q", "test_other.py")
    assert "1 deselected" in named.stdout.str()


def test_a_scenario_path_after_a_space_is_refused_saying_to_use_equals(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = tmp_path / "x.toml"
    scenario.write_text("")
    result = pytester.runpytest(*NO_CACHE, "-m", "qmax", "--tts-scenario", str(scenario))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--tts-scenario {scenario}: expected --tts-scenario={scenario}*"]
    )


USERS_GATE = """\
import pytest

@pytest.mark.qmax
def test_holds_eight_streams(tts_qmax):
    assert tts_qmax.q_max is not None and tts_qmax.q_max >= 8, f"Q_max {tts_qmax.q_max}"

@pytest.mark.plan
def test_fleet_stays_small(tts_plan):
    assert tts_plan.max_instances <= 3, f"plan wants {tts_plan.max_instances} instances"
"""


def test_a_users_own_gate_asserts_on_the_measured_qmax_and_the_plan(
    pytester: pytest.Pytester,
) -> None:
    """The public fixtures (docs/fixtures.md) in a test file of the user's: their gate runs in
    place of the packaged scenario and fails with their own message."""
    pytester.makepyfile(test_gate=USERS_GATE)
    with SerialStreamServer(service_s=0.1, first_audio_s=0.05) as server:
        qmax = pytester.runpytest_subprocess(
            *NO_CACHE,
            *("-m", "qmax", "--endpoint-url", server.base_url),
            *("--tts-ladder", "1,2,3", "--tts-hold-s", "2", "--tts-measure-s", "1.5"),
            *("--tts-gap-s", "0", "--tts-slo-ms", "200"),
        )
    qmax.assert_outcomes(failed=1, deselected=1)
    qmax.stdout.fnmatch_lines(["*AssertionError: Q_max 2"])
    examples = ROOT / "reports" / "examples" / "source"
    qmax_artifact = examples / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
    plan = pytester.runpytest_subprocess(
        *NO_CACHE,
        *("-m", "plan", "--tts-peak-rps", "5000", "--tts-trough-rps", "10"),
        # With '=': a path after a space is read by pytest as where to look for tests.
        f"--tts-qmax-artifact={qmax_artifact}",
        f"--tts-ttotal-artifact={examples / 'ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json'}",
    )
    plan.assert_outcomes(failed=1, deselected=1)
    plan.stdout.fnmatch_lines(["*AssertionError: plan wants * instances"])
    for result in (qmax, plan):
        assert "pytest_tts_scaling/scenarios" not in result.stdout.str()
