"""A qmax artifact measured on the container's synthetic engine says so on every plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_tts_scaling.optional import needs_extra
from pytest_tts_scaling.report.extras import (
    DEV_MODEL_LABEL,
    SYNTHETIC_LABEL,
    SYNTHETIC_NOTE,
    rung_table_html,
)
from pytest_tts_scaling.report.pages import load_shown, view_for

ROOT = Path(__file__).resolve().parent.parent
LOCAL_QMAX = (
    ROOT
    / "reports"
    / "examples"
    / "h200-dev-model"
    / "qmax-kokoro-82m-response-stream-local-636e7424.json"
)


def test_every_plot_and_the_rung_table_name_the_synthetic_engine(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason=needs_extra("matplotlib"))
    raw = json.loads(LOCAL_QMAX.read_text())
    raw["deployed_config"]["container_env"]["ENGINE"] = "synthetic"
    path = tmp_path / LOCAL_QMAX.name
    path.write_text(json.dumps(raw))
    shown = load_shown(path)
    view = view_for(shown)
    assert view.figures
    for figure in view.figures:
        assert SYNTHETIC_LABEL in figure.svg, figure.key
        assert DEV_MODEL_LABEL not in figure.svg, figure.key
    assert SYNTHETIC_NOTE.split(":")[0] in rung_table_html(shown.artifact)  # type: ignore[arg-type]
