"""Shared helpers for the project's own tests."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def pyplot_imported() -> None:
    """matplotlib's pyplot imported in this process, as the report draws it. An in-process
    pytester run drops the modules it imported when it ends: pyplot imported first inside one,
    then again beside the matplotlib package that collection kept, mixes two copies of its
    classes ("Single argument to subplot must be a three-digit integer, not GridSpec")."""
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot


@pytest.fixture
def pytester(pyplot_imported: None, pytester: pytest.Pytester) -> pytest.Pytester:
    """pytest's pytester, once pyplot is imported in this process (pyplot_imported)."""
    return pytester


@pytest.fixture
def qmax_scenario(pytester: pytest.Pytester) -> Path:
    """The real `scenarios/test_qmax.py`, copied into a pytester directory."""
    return pytester.makepyfile(test_qmax=(ROOT / "scenarios" / "test_qmax.py").read_text())


@pytest.fixture
def serial_server() -> Iterator[SerialStreamServer]:
    """One request at a time, 100 ms each, first audio after 50 ms: Q_max 10 at a 1000 ms SLO."""
    with SerialStreamServer(service_s=0.1, first_audio_s=0.05) as server:
        yield server
