"""Artifacts with only the required fields of the format (docs/artifacts.md) plan and synthesize.

The source example's qmax and ttotal artifacts are cut down to the format's required fields (no
`count` in any summary), planned with `tts-bench plan`, and the plan, cut down the same way with
every recommendation null, is synthesized. A plan that lacks a promised field fails synthesis
in one line naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from infra_helpers import MODEL, of_type, start_app, synthesize, templates

from pytest_tts_scaling.cli import main

SOURCE = Path(__file__).resolve().parents[2] / "reports" / "examples" / "source"
QMAX = SOURCE / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
TTOTAL = SOURCE / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"

# The format's required fields, and nothing more.
SUMMARY = ("mean", "min", "max", "std", "p50", "p90", "p95", "p99")
RUNG = (
    "concurrency", "usable", "unusable_reason", "meets_slo", "completed", "rejected",
    "measure_s", "throughput_rps", "concurrency_mean", "ttfab_ms", "latency_ms", "cw_ratio",
)  # fmt: skip
PROVENANCE = ("origin", "run_id", "measured_at", "tool_version", "git_commit")
DEPLOYED = ("instance_type", "image_digest", "container_env")
QMAX_FIELDS = (
    "schema", "model", "endpoint", "transport", "slug", "deployed_config", "slo_ms", "q_max",
    "q_max_bracketed", "s_mean_s", "s_p95_s", "ttfab_p95_at_c1_ms", "frozen", "unbounded_queue",
    "rungs", "provenance",
)  # fmt: skip
TTOTAL_FIELDS = (
    "schema", "model", "slug", "transport", "trigger", "t_measured_s", "policy_lag_bound_s",
    "t_total_s", "bounded", "stages", "provenance",
)  # fmt: skip
STAGE = ("stage", "at", "bounded", "source")
PLAN_FIELDS = (
    "schema", "model", "slug", "inputs", "c_scale_max", "c_scale_min", "cw_units_ratio",
    "scaling_target_value", "scale_in_threshold", "w_max_s", "queue_max_depth",
    "scale_out_cooldown_s", "scale_in_cooldown_s", "min_instances", "max_instances",
    "min_safe_instances", "per_instance_rps_at_c_scale_max", "first_chunk_alarm_ms", "findings",
    "verdict", "config_block",
)  # fmt: skip
FINDING = ("name", "verdict", "detail", "recommendation")


def only(raw: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: raw[name] for name in fields}


def minimal_qmax(raw: dict[str, Any]) -> dict[str, Any]:
    cut = only(raw, QMAX_FIELDS)
    cut["deployed_config"] = only(raw["deployed_config"], DEPLOYED)
    cut["provenance"] = only(raw["provenance"], PROVENANCE)
    cut["rungs"] = [
        only(rung, RUNG)
        | {
            "ttfab_ms": only(rung["ttfab_ms"], SUMMARY),
            "latency_ms": only(rung["latency_ms"], SUMMARY),
        }
        for rung in raw["rungs"]
    ]
    return cut


def minimal_ttotal(raw: dict[str, Any]) -> dict[str, Any]:
    cut = only(raw, TTOTAL_FIELDS)
    cut["provenance"] = only(raw["provenance"], PROVENANCE)
    cut["stages"] = [only(stage, STAGE) for stage in raw["stages"]]
    return cut


def minimal_plan(raw: dict[str, Any]) -> dict[str, Any]:
    cut = only(raw, PLAN_FIELDS)
    cut["findings"] = [only(f, FINDING) | {"recommendation": None} for f in raw["findings"]]
    return cut


def write(path: Path, raw: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw, indent=2))
    return path


@pytest.fixture(scope="module")
def minimal_reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """reports/ holding a minimal plan, planned from minimal qmax and ttotal."""
    inputs = tmp_path_factory.mktemp("minimal-inputs")
    qmax = write(inputs / QMAX.name, minimal_qmax(json.loads(QMAX.read_text())))
    ttotal = write(inputs / TTOTAL.name, minimal_ttotal(json.loads(TTOTAL.read_text())))
    planned = tmp_path_factory.mktemp("minimal-planned")
    args = [
        "--qmax-artifact",
        qmax,
        "--ttotal-artifact",
        ttotal,
        "--peak-rps",
        5000,
        "--trough-rps",
        10,
    ]
    assert main(["plan", *map(str, args), "--artifacts-dir", str(planned)]) == 0
    plan = json.loads((planned / f"plan-{MODEL}.json").read_text())
    reports = tmp_path_factory.mktemp("minimal-reports")
    write(reports / f"plan-{MODEL}.json", minimal_plan(plan))
    return reports


def test_spec_minimal_qmax_and_ttotal_plan_like_the_full_ones(minimal_reports: Path) -> None:
    plan = json.loads((minimal_reports / f"plan-{MODEL}.json").read_text())
    full = json.loads((SOURCE / f"plan-{MODEL}.json").read_text())
    numbers = ("scaling_target_value", "scale_in_threshold", "min_instances", "max_instances")
    assert only(plan, numbers) == only(full, numbers)
    assert {f["name"] for f in plan["findings"]} == {f["name"] for f in full["findings"]}


def test_a_spec_minimal_plan_synthesizes_with_autoscaling(
    minimal_reports: Path, tmp_path: Path
) -> None:
    synth = synthesize(tmp_path / "out", artifacts_dir=minimal_reports)
    assert f"{MODEL}: autoscaling from " in synth.printed
    written = templates(tmp_path / "out")
    (target,) = of_type(written, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["MaxCapacity"] == 249


def test_a_plan_missing_a_promised_field_fails_synthesis_in_one_line(
    minimal_reports: Path, tmp_path: Path
) -> None:
    plan = json.loads((minimal_reports / f"plan-{MODEL}.json").read_text())
    del plan["findings"][0]["verdict"]
    reports = tmp_path / "reports"
    path = write(reports / f"plan-{MODEL}.json", plan)
    process = start_app(tmp_path, reports)
    assert process.wait(timeout=300) == 2
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("speech-infra synth: error:")]
    assert str(path) in line
    assert "field 'findings.0.verdict'" in line
