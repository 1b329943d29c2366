"""The keys the plugin and its fixtures share on pytest's stash.

Their own module, so the fixtures read them without importing the plugin that registers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_tts_scaling.core.compare import Comparison
    from pytest_tts_scaling.options import RunOptions
    from pytest_tts_scaling.report.extras import ReportExtras

OPTIONS_KEY: pytest.StashKey[RunOptions] = pytest.StashKey()
SUMMARY_KEY: pytest.StashKey[list[str]] = pytest.StashKey()
EXTRAS_KEY: pytest.StashKey[ReportExtras] = pytest.StashKey()
# The qmax scenario's comparison with --baseline, for the run --mlflow records at the session's end.
COMPARISON_KEY: pytest.StashKey[Comparison] = pytest.StashKey()
