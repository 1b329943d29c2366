"""`pytest -m ttotal --tts-qmax-artifact F`: measure how long a scale-out really takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tts_scaling.core.schema import TtotalArtifact
from pytest_tts_scaling.report.extras import ReportExtras, stages_table_html

pytestmark = pytest.mark.ttotal


def test_new_instance_reached_service(
    tts_scale_timeline: tuple[TtotalArtifact, Path], tts_report: ReportExtras
) -> None:
    artifact, path = tts_scale_timeline
    tts_report.artifact(artifact, path)
    tts_report.html(stages_table_html(artifact), name="scale-out stages")
    stages = [s.stage for s in artifact.stages]
    assert "desired_set" in stages
    assert "in_service" in stages, f"the new instance never reached service; stages: {stages}"


def test_stages_are_ordered(tts_scale_timeline: tuple[TtotalArtifact, Path]) -> None:
    artifact, _ = tts_scale_timeline
    assert not artifact.out_of_order_stages, (
        f"stages earlier than the stage they follow: {artifact.out_of_order_stages}"
    )


def test_traffic_recovered(tts_scale_timeline: tuple[TtotalArtifact, Path]) -> None:
    artifact, _ = tts_scale_timeline
    probe = artifact.probe
    assert probe.get("recovered"), (
        f"probe p95 TTFAB never came back within {probe.get('recovery_threshold_ms')} ms after "
        f"scale-out (1.25 x the ladder's p95 at N={probe.get('post_scale_concurrency')})"
    )
