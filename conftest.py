"""Repository-level pytest configuration: the measurement suite's report title, the e2e and
timing markers, and `make test`'s two runs (--phase)."""

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


# Modules whose results depend on the CPU being free: `make test` runs them alone, after the rest
# has run two processes at a time (`--phase timing`). A module joins for what it asserts (a
# measured answer, a latency bound, a rate held), not for how long it takes; where unsure, it joins.
TIMING_MODULES = frozenset(
    {
        # Ladders against a server of known answer: a busy client reads its rungs as
        # client_saturated or misses the Q_max the test expects.
        "tests/test_any_server.py",
        "tests/test_baseline_gate.py",
        "tests/test_calibration_matrix.py",
        "tests/test_early_end.py",
        "tests/test_failures.py",
        "tests/test_foreign_project.py",
        "tests/test_health.py",
        "tests/test_honest_changes.py",
        "tests/test_inconclusive.py",
        "tests/test_ladder_trust.py",
        "tests/test_mlflow.py",
        "tests/test_plugin.py",
        "tests/test_progress.py",
        "tests/test_quality.py",
        "tests/test_scenario.py",
        "tests/test_slo_tiers.py",
        "tests/test_wheel_install.py",
        "tests/aws/test_aws_exit_order.py",
        "tests/aws/test_walkthrough.py",
        # The documentation's commands run as printed, qmax ladders and a baseline gate among them.
        "tests/test_docs_examples.py",
        # The client's own overhead against what the server saw; latency bounds of the reference
        # servers and transports; the time to first audio of a WAV answer.
        "tests/test_client_honesty.py",
        "tests/test_calibration_servers.py",
        "tests/test_transports.py",
        "tests/test_wav_detection.py",
        "tests/aws/test_aws_stream.py",
        # ttotal's probe tells the slow instance from the fast one by its time to first audio.
        "tests/aws/test_aws_scaleout.py",
        # Fleets under load: rates held, the emulated policy's scale-out and cooldown.
        "tests/test_fleet_load.py",
        "tests/test_fleet_localfleet.py",
        "tests/test_fleet_validate_live.py",
        "tests/aws/test_fleet_sagemaker.py",
        # A real browser renders the report of a measured run.
        "tests/test_report_browser.py",
        # The real model (Kokoro's forward passes): the local endpoint's ladder, the container under
        # overload, the trained model heard by the recognizer (past its timeout beside another
        # process), the conversion, batching, the development model's audio.
        "tests/test_local_e2e.py",
        "container/tests/test_container_batching.py",
        "container/tests/test_container_dev_model.py",
        "container/tests/test_container_device.py",
        "container/tests/test_container_e2e.py",
        "container/tests/test_container_speech.py",
        "container/tests/test_container_speech_ja.py",
        "container/tests/test_container_trained_conversion.py",
    }
)

PARALLEL, TIMING = "parallel", "timing"


def relative(path: Path) -> str | None:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


def is_e2e(path: Path) -> bool:
    name = relative(path)
    return name is not None and (name in E2E_MODULES or name.startswith("scenarios/"))


def is_timing(path: Path) -> bool:
    return relative(path) in TIMING_MODULES


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase",
        choices=(PARALLEL, TIMING),
        default=None,
        help="make test's two runs: 'parallel' runs the tests without the timing marker (under "
        "pytest-xdist), 'timing' only those with it; -m, -k and paths still apply. "
        "Default: every test",
    )


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark e2e and timing as each test is collected, before `-m` selects: one list here rather
    than a line per module."""
    if is_e2e(item.path):
        item.add_marker(pytest.mark.e2e)
    if is_timing(item.path):
        item.add_marker(TIMING)


@pytest.hookimpl(trylast=True)  # after -m, -k and the plugin's own selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under --phase, leave out the other run's tests."""
    phase = config.getoption("phase")
    if phase is None:
        return
    keep: list[pytest.Item] = []
    other: list[pytest.Item] = []
    for item in items:
        timing = item.get_closest_marker(TIMING) is not None
        (keep if timing == (phase == TIMING) else other).append(item)
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = keep


@pytest.hookimpl(optionalhook=True)
def pytest_html_report_title(report: Any) -> None:
    report.title = "pytest-tts-scaling measurement report"
