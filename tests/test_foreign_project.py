"""The plugin in other people's projects: it measures from any of them, and a suite that does not
use it runs exactly as it would without it installed.

Each project is a pytester directory with no scenarios of its own: the steps it runs are the
packaged ones (`pytest_tts_scaling.scenarios`).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.load.scenario import shipped_folder
from pytest_tts_scaling.option_table import OPTION_SPECS

ROOT = Path(__file__).resolve().parents[1]
NO_CACHE = ("-p", "no:cacheprovider")
WITHOUT_PLUGIN = ("-p", "no:tts_scaling")

# A suite of its own: markers that share the plugin's step names, options that share the names
# the plugin takes (the endpoint's short names) or once took, a session fixture that fails in one
# line, a module skipped while collecting, and its own HTML report.
FOREIGN_INI = """\
[pytest]
markers =
    validate: this project's own input validation tests
    plan: this project's own planner tests
    drift: this project's own clock drift tests
"""
FOREIGN_CONFTEST = """\
import pytest

def pytest_addoption(parser):
    parser.addoption("--endpoint", default="theirs")
    parser.addoption("--endpoint-url", default=None)
    parser.addoption("--dry-run", action="store_true")
    parser.addoption("--model", default="small")
    parser.addoption("--runs", type=int, default=1)
    parser.addoption("--force", action="store_true")
    parser.addoption("--baseline", default=None)

@pytest.fixture(scope="session")
def database():
    pytest.fail("no database on this machine", pytrace=False)
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

def test_their_endpoint(request):
    assert request.config.getoption("--endpoint") in ("theirs", "staging")

def test_reads_the_database(database):
    pass

def test_writes_the_database(database):
    pass

def test_their_one_line_failure():
    pytest.fail("their own one-line failure", pytrace=False)

def test_plain():
    pass
"""
SKIPPED_MODULE = """\
import pytest

pytest.skip("no Chromium here", allow_module_level=True)
"""


@pytest.fixture
def foreign(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(FOREIGN_INI)
    pytester.makeconftest(FOREIGN_CONFTEST)
    pytester.makepyfile(test_theirs=FOREIGN_TESTS, test_gone=SKIPPED_MODULE)
    (pytester.path / "data").mkdir()
    (pytester.path / "data" / "base.json").write_text("{}")
    return pytester


def listing(folder: Path) -> dict[str, object]:
    """The project's files, without what pytester keeps beside them (the subprocess's stdout and
    stderr, its basetemp); of an HTML report, what it says about the tests."""
    ours = ("stdout", "stderr", "__pycache__")
    return {
        str(p.relative_to(folder)): html_words(p) if p.suffix == ".html" else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
        and not any(part in ours or part.startswith("runpytest-") for part in p.parts)
    }


def html_words(report: Path) -> object:
    """pytest-html's counts and each test's result and log; not its timings, its environment (the
    list of plugins) or an object's address."""
    text = report.read_text()
    counts = re.findall(
        r"(\d+) (Failed|Passed|Skipped|Expected failures|Unexpected passes|Errors)", text
    )
    blob = re.search(r'data-jsonblob="([^"]*)"', text)
    if blob is None:
        return text
    tests = json.loads(html.unescape(blob.group(1)))["tests"]
    rows = {
        name: [(run["result"], re.sub(r"0x[0-9a-f]+", "0x", run["log"])) for run in runs]
        for name, runs in tests.items()
    }
    return counts, rows


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
        ("--endpoint", "staging", "--endpoint-url", "http://their.host"),
        ("--baseline", "data/base.json"),
        ("--baseline", "data"),
        ("--html", "report.html", "--self-contained-html"),
        ("-m", "validate or plan", "--html", "report.html"),
    ],
    ids=[
        "plain",
        "own-validate",
        "own-steps",
        "collect",
        "own-options",
        "own-endpoint",
        "own-spaced-path",
        "own-spaced-folder",
        "own-html",
        "own-steps-html",
    ],
)
def test_a_suite_that_does_not_use_the_plugin_runs_as_without_it(
    foreign: pytest.Pytester, args: tuple[str, ...]
) -> None:
    """Same output, exit status, collection and files with the plugin installed and without it,
    an earlier report.html included (left to pytest-html to write over, as without the plugin):
    the failing session fixture's and the test's own one-line failures read as pytest writes them,
    the module skipped while collecting is counted as pytest-html counts it."""
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


# Every option of the plugin's that names a file or folder.
PATH_OPTIONS = [
    spec for spec in OPTION_SPECS if {"FILE", "DIR", "PATH"} & set((spec.metavar or "").split("|"))
]


def test_every_option_that_takes_a_path_is_checked_below() -> None:
    names = {spec.flag for spec in PATH_OPTIONS}
    expected = {"--scenario", "--model-dir", "--artifacts-dir", "--export-csv", "--baseline"}
    assert expected | {"--qmax-artifact", "--ttotal-artifact", "--plan-artifact"} <= names


def path_for(flag: str, folder: Path) -> Path:
    """A value the option accepts, in `folder`: a folder for a DIR, else a workload file."""
    spec = next(spec for spec in PATH_OPTIONS if spec.flag == flag)
    if spec.metavar == "DIR":
        (folder / "somewhere").mkdir(exist_ok=True)
        return folder / "somewhere"
    shutil.copy(shipped_folder() / "kokoro-82m.toml", folder / "workload.toml")
    shutil.copytree(shipped_folder() / "texts", folder / "texts", dirs_exist_ok=True)
    return folder / "workload.toml"


@pytest.mark.parametrize("flag", [spec.flag for spec in PATH_OPTIONS])
def test_a_path_option_after_a_space_keeps_the_rootdir_or_is_refused_naming_the_equals_form(
    foreign: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, flag: str
) -> None:
    """pytest picks its rootdir and ini before it knows a plugin's options, so a path after a
    space is read as where the tests are: one outside the project would drop the project's ini
    (markers, addopts). Refused in one line naming the `=` form; inside the project, or with
    '=', the project's rootdir and ini hold (its markers, here under --strict-markers)."""
    option = f"--tts-{flag.removeprefix('--')}"
    outside = path_for(flag, tmp_path_factory.mktemp("elsewhere"))
    refused = foreign.runpytest(*NO_CACHE, "--strict-markers", option, str(outside))
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert refused.errlines == [
        f"ERROR: {option} {outside}: expected {option}={outside} (with '='): after a space "
        "pytest reads the path as where the tests are, and looks there for its rootdir and "
        "configuration",
        "",
    ]
    inside = path_for(flag, foreign.path / "data").relative_to(foreign.path)
    for args in ((option, str(inside)), (f"{option}={outside}",)):
        kept = foreign.runpytest(*NO_CACHE, "--strict-markers", "--collect-only", "-q", *args)
        assert kept.ret == pytest.ExitCode.OK, kept.stdout.str() + kept.stderr.str()
        assert kept.stdout.lines[-1].startswith("8 tests collected"), kept.stdout.lines[-1]


def test_a_project_with_its_own_endpoint_options_measures_with_the_prefixed_ones(
    foreign: pytest.Pytester,
) -> None:
    """The project's conftest defines --endpoint and --endpoint-url: pytest starts, the project
    keeps them, and the step measures the endpoint named by --tts-endpoint-url, saying first
    which names are the plugin's."""
    with SerialStreamServer(service_s=0.1, first_audio_s=0.05) as server:
        result = foreign.runpytest_subprocess(
            *NO_CACHE,
            *("-m", "qmax", "--endpoint", "staging", "--tts-endpoint-url", server.base_url),
            *("--tts-ladder", "1,2,3", "--tts-hold-s", "2", "--tts-measure-s", "1.5"),
            *("--tts-gap-s", "0", "--tts-slo-ms", "200"),
        )
    notice = (
        "--endpoint and --endpoint-url are this project's own options: the plugin's are "
        "--tts-endpoint and --tts-endpoint-url"
    )
    assert f"tts-scaling: {notice}" in result.outlines[:4]
    assert (
        notice
        in result.outlines[
            result.outlines.index(next(x for x in result.outlines if "= tts-scaling =" in x)) :
        ]
    )
    [artifact] = (foreign.path / "reports").glob("qmax-kokoro-82m-response-stream-url-*.json")
    assert json.loads(artifact.read_text())["q_max"] == 2
    assert result.ret == pytest.ExitCode.OK


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
