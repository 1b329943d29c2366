"""`make test`'s two runs: the timing list names real files, --phase splits a selection between
the two runs without losing or repeating a test, and no test imports Locust in the pytest process
(its workers would crash)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_guards import imports_in

ROOT = Path(__file__).resolve().parents[1]


def test_every_timing_module_exists(pytestconfig: pytest.Config) -> None:
    """A module moved or renamed must be moved in the list too: else its tests silently lose
    the marker and run beside another process (tests/test_guards.py holds E2E_MODULES)."""
    conftest = pytestconfig.pluginmanager.get_plugin(str(ROOT / "conftest.py"))
    assert conftest is not None, "the repository's conftest.py is not loaded"
    missing = sorted(m for m in conftest.TIMING_MODULES if not (ROOT / m).is_file())
    assert not missing, f"conftest.py's TIMING_MODULES names modules that do not exist: {missing}"
    assert conftest.is_timing(ROOT / "tests" / "test_health.py")
    assert not conftest.is_timing(Path(__file__))


def collected(*args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_each_test_runs_in_exactly_one_of_the_two_runs() -> None:
    modules = ("tests/test_health.py", "tests/test_stats.py")
    everything = collected(*modules)
    parallel = collected("--phase=parallel", *modules)
    timing = collected("--phase=timing", *modules)
    assert parallel
    assert timing
    assert all(test.startswith("tests/test_stats.py::") for test in parallel)
    assert all(test.startswith("tests/test_health.py::") for test in timing)
    assert sorted(parallel + timing) == sorted(everything)


def test_a_selection_may_leave_one_run_empty() -> None:
    """-k, -m and paths apply in both runs: `make test ARGS=...` runs what they select, in
    whichever run it belongs to."""
    assert collected("--phase=timing", "-m", "not timing", "tests/test_health.py") == []
    chosen = collected("--phase=timing", "-k", "stall_bound", "tests/test_health.py")
    assert chosen
    assert all("stall_bound" in test for test in chosen)


# Importing any of these monkey-patches the process with gevent: in a pytest-xdist worker that
# breaks its channel to the controller and the whole run fails ('node down').
GEVENT_MODULES = (
    "locust",
    "gevent",
    "pytest_tts_scaling.fleet.user",
    "pytest_tts_scaling.fleet.runner",
)


def test_no_test_imports_locust_in_the_pytest_process() -> None:
    """Tests look Locust up (importlib.util.find_spec) and run it in a subprocess."""
    folders = [ROOT / folder for folder in ("tests", "container/tests", "infra/tests", "scenarios")]
    offenders = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for folder in folders
        for path in folder.rglob("*.py")
        for name in imports_in(path.read_text(encoding="utf-8"), "tests")
        if any(name == banned or name.startswith(f"{banned}.") for banned in GEVENT_MODULES)
    )
    assert not offenders, offenders
