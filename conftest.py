"""Repository-level pytest configuration: the measurement suite's report title, the e2e and
serial markers, and `make test`'s two phases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent

# Modules that run the real model (a Kokoro forward pass) or hold load (ladders with rungs held
# for seconds, fleets, browsers): `pytest -m "not e2e"` leaves them out for a quick loop.
# scenarios/ are e2e too: each measures or reads a live endpoint.
E2E_MODULES = frozenset(
    {
        "container/tests/test_container_batching.py",
        "container/tests/test_container_dev_model.py",
        "container/tests/test_container_e2e.py",
        "container/tests/test_container_speech.py",
        "container/tests/test_container_speech_ja.py",
        "container/tests/test_container_trained_conversion.py",
        "tests/aws/test_fleet_sagemaker.py",
        "tests/aws/test_walkthrough.py",
        "tests/test_baseline_gate.py",
        "tests/test_calibration_matrix.py",
        "tests/test_client_honesty.py",
        "tests/test_fleet_load.py",
        "tests/test_fleet_localfleet.py",
        "tests/test_fleet_validate_live.py",
        "tests/test_local_e2e.py",
        "tests/test_report_browser.py",
        "tests/test_wheel_install.py",
    }
)

# Modules that judge timing under load they hold themselves: each needs the machine to itself,
# so `make test` runs them one after another once everything else has run two at a time
# (`--phase serial`). A module joins this list for what it asserts, not for how long it takes.
SERIAL_MODULES = frozenset(
    {
        # A ladder against a server of known answer must find that Q_max (or bracket it).
        "tests/test_calibration_matrix.py",
        "tests/test_plugin.py",
        "tests/test_scenario.py",
        "tests/test_foreign_project.py",
        "tests/test_baseline_gate.py",
        "tests/test_local_e2e.py",
        "tests/test_any_server.py",
        "tests/test_wheel_install.py",
        # A clearly failing rung must end early and the ladder still bracket: with a busy client
        # its rungs read client_saturated instead.
        "tests/test_early_end.py",
        # Each rung of a ladder is transcribed: rungs must pass to be transcribed.
        "tests/test_quality.py",
        # The client's own overhead, measured against what the server saw.
        "tests/test_client_honesty.py",
        # Fleets under load: rates held, the emulated policy's scale-out and cooldown.
        "tests/test_fleet_load.py",
        "tests/test_fleet_localfleet.py",
        "tests/test_fleet_validate_live.py",
        # The real container under overload: its ping must stay fast.
        "container/tests/test_container_e2e.py",
        # The trained model through the container, heard by the recognizer: beside another
        # worker on a busy host it ran past its 900 s timeout.
        "container/tests/test_container_speech.py",
    }
)

PHASES = ("parallel", "serial")


def _relative(path: Path) -> str | None:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


def is_e2e(path: Path) -> bool:
    relative = _relative(path)
    return relative is not None and (relative in E2E_MODULES or relative.startswith("scenarios/"))


def is_serial(path: Path) -> bool:
    return _relative(path) in SERIAL_MODULES


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase",
        choices=PHASES,
        default=None,
        help="`make test`'s phases: 'parallel' runs all but the serial modules (conftest.py "
        "lists them), 'serial' runs only those; default: everything",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "serial: judges timing under its own load; conftest.py lists the modules"
    )
    missing = sorted(m for m in E2E_MODULES | SERIAL_MODULES if not (ROOT / m).is_file())
    if missing:
        raise pytest.UsageError(f"conftest.py lists modules that do not exist: {missing}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark e2e and serial before `-m` selects (tryfirst), one list here rather than a line per
    module; under `--phase`, deselect the other phase's modules (`-m` and `-k` still apply)."""
    for item in items:
        if is_e2e(item.path):
            item.add_marker(pytest.mark.e2e)
        if is_serial(item.path):
            item.add_marker(pytest.mark.serial)
    phase = config.getoption("phase")
    if phase is None:
        return
    other = [item for item in items if is_serial(item.path) != (phase == "serial")]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = [item for item in items if is_serial(item.path) == (phase == "serial")]


@pytest.hookimpl(optionalhook=True)
def pytest_html_report_title(report: Any) -> None:
    report.title = "pytest-tts-scaling measurement report"
