"""Repository-level pytest configuration: the measurement suite's report title, the e2e marker."""

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


def is_e2e(path: Path) -> bool:
    try:
        relative = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return False
    return relative in E2E_MODULES or relative.startswith("scenarios/")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark e2e before `-m` selects (tryfirst), one list here rather than a line per module."""
    for item in items:
        if is_e2e(item.path):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(optionalhook=True)
def pytest_html_report_title(report: Any) -> None:
    report.title = "pytest-tts-scaling measurement report"
