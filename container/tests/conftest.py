"""Fixtures for the container's tests.

They import the container's package inside the fixtures: without it this folder is skipped, naming
the command that installs it, where an import here would stop the whole session.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from container_fakes import AppFactory, FakeEngine
    from starlette.applications import Starlette


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    pytest.importorskip(
        "tts_container",
        reason="the container's tests need its package: expected it installed "
        "(pip install -e './container[test]')",
    )


@pytest.fixture
def make_app(tmp_path: Path) -> AppFactory:
    """``make_app(engine=None, **settings)`` -> (app, engine, metrics lines)."""

    def factory(
        engine: FakeEngine | None = None, **settings: Any
    ) -> tuple[Starlette, FakeEngine, io.StringIO]:
        from container_fakes import FakeEngine
        from tts_container.app import create_app
        from tts_container.metrics import MetricsLog
        from tts_container.settings import Settings

        engine = FakeEngine() if engine is None else engine
        settings.setdefault("inference_workers", 1)  # the fake's tests count on one unless named
        metrics_out = io.StringIO()
        app = create_app(
            Settings(cache_dir=tmp_path / "cache", **settings),
            engine_factory=lambda _settings: engine,
            metrics=MetricsLog("test-model", stream=metrics_out),
        )
        return app, engine, metrics_out

    return factory


@pytest.fixture(scope="session")
def dev_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the development model, built once per test session."""
    from tts_container.dev_model import ensure_dev_model

    cache = tmp_path_factory.mktemp("tts-cache")
    ensure_dev_model(cache)
    return cache


@pytest.fixture(scope="session")
def trained_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the trained model, converted once per test session."""
    from tts_container.trained_model import ensure_trained_model

    cache = tmp_path_factory.mktemp("tts-trained")
    ensure_trained_model(cache)
    return cache
