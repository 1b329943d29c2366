"""Repository-level pytest configuration: the measurement suite's report title."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_html_report_title(report: Any) -> None:
    report.title = "pytest-tts-scaling measurement report"
