"""A pytest plugin, `-p tests.without_extras`: the extras' modules cannot be imported, as in an
environment that installed the plugin alone (a `None` in sys.modules makes `import` fail with
ModuleNotFoundError and `importlib.util.find_spec` answer None)."""

from __future__ import annotations

import sys

import pytest

from pytest_tts_scaling.optional import EXTRA_OF_MODULE


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests() -> None:
    for name in EXTRA_OF_MODULE:
        sys.modules[name] = None  # type: ignore[assignment]
