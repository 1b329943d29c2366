"""The gate, without synthesis: which plans turn autoscaling on, and what is said otherwise."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from infra_helpers import MODEL, write_plan
from speech_infra.plan_gate import ScalingDecision, decide_scaling
from speech_infra.registry import REGISTRY

from pytest_tts_scaling.core.schema import Finding
from pytest_tts_scaling.errors import ArtifactError
from tests.factories import make_plan

KOKORO = REGISTRY[MODEL]


def decide(reports: Path, **changes: Any) -> ScalingDecision:
    config = dataclasses.replace(KOKORO, **changes)
    return decide_scaling(config, artifacts_dir=reports, project_root=reports.parent)


def test_no_plan_leaves_scaling_out_and_says_how_to_get_one(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    decision = decide(reports)
    assert not decision.autoscaling
    assert decision.plan is None
    assert decision.message == (
        "kokoro-82m: autoscaling left out: no plan at reports/plan-kokoro-82m.json "
        "(run tts-bench plan)"
    )


def test_a_plan_with_verdict_ok_or_warn_turns_scaling_on(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write_plan(reports, make_plan(verdict="ok"))
    decision = decide(reports)
    assert decision.autoscaling
    assert decision.plan is not None
    assert decision.plan.scaling_target_value == 37.5
    assert decision.message == (
        "kokoro-82m: autoscaling from reports/plan-kokoro-82m.json (verdict ok): target 37.5, "
        "scale-in 25, cooldowns 30/960 s, instances 1..29"
    )


def test_verdict_stop_leaves_scaling_out_naming_the_stop_findings(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    stop = Finding(name="invocation_ceiling", verdict="stop", detail="-", recommendation="-")
    write_plan(reports, make_plan(verdict="stop", findings=[stop]))
    decision = decide(reports)
    assert not decision.autoscaling
    assert decision.plan is None  # a stopped plan configures nothing, not even the queue depth
    assert "has verdict stop (invocation_ceiling)" in decision.message
    assert "autoscaling left out" in decision.message


def test_scaling_disabled_in_registry_wins_over_a_plan(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write_plan(reports, make_plan())
    decision = decide(reports, max_instances=1)
    assert not decision.autoscaling
    assert decision.plan is not None  # still trusted for queue_max_depth
    assert "scaling disabled in the registry (max_instances 1 is not above min_instances 1)" in (
        decision.message
    )


def test_a_plan_that_fixes_the_fleet_leaves_scaling_out(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write_plan(reports, make_plan(min_instances=3, max_instances=3))
    decision = decide(reports)
    assert not decision.autoscaling
    assert "fixes the fleet at 3 instance(s)" in decision.message


def test_registry_lagging_the_plan_is_noted(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write_plan(reports, make_plan(max_instances=29, queue_max_depth=48))
    (note,) = decide(reports).notes
    assert "max_instances 249 -> 29, queue_max_depth 50 -> 48" in note
    assert "the plan is used" in note


def test_a_plan_measured_on_other_hardware_is_noted(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write_plan(reports, make_plan(slug="local-1a2b3c4d", max_instances=249))
    (note,) = decide(reports).notes
    assert "measured on slug 'local-1a2b3c4d'" in note


def test_matching_registry_and_plan_make_no_notes(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write_plan(reports, make_plan(max_instances=249))
    assert decide(reports).notes == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "not JSON"),
        ("[]", "expected a JSON object"),
        (json.dumps({"schema": "tts-scaling/qmax/1"}), "field 'schema': expected"),
    ],
)
def test_unreadable_plan_fails_instead_of_skipping_scaling(
    tmp_path: Path, text: str, expected: str
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "plan-kokoro-82m.json").write_text(text)
    with pytest.raises(ArtifactError, match=expected):
        decide(reports)


def test_plan_missing_a_field_fails_naming_it(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    path = write_plan(reports, make_plan())
    data = json.loads(path.read_text())
    del data["scale_in_cooldown_s"]
    path.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="field 'scale_in_cooldown_s': field required"):
        decide(reports)


def test_plan_for_another_model_fails(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    plan = make_plan(model="other-model")
    path = reports / "plan-kokoro-82m.json"
    reports.mkdir()
    path.write_text(json.dumps(plan.model_dump(mode="json", by_alias=True)))
    with pytest.raises(
        ArtifactError, match="field 'model': expected 'kokoro-82m', got 'other-model'"
    ):
        decide(reports)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"min_instances": 0}, "min_instances"),
        ({"max_instances": 0, "min_instances": 1}, "max_instances"),
        ({"scaling_target_value": 0.0}, "scaling_target_value"),
        ({"scale_in_threshold": 37.5}, "scale_in_threshold"),
        ({"scale_out_cooldown_s": -1}, "scale_out_cooldown_s"),
        ({"scale_in_cooldown_s": -1}, "scale_in_cooldown_s"),
        ({"queue_max_depth": -1}, "queue_max_depth"),
        ({"first_chunk_alarm_ms": 0.0}, "first_chunk_alarm_ms"),
    ],
)
def test_plan_values_no_policy_can_use_fail_naming_the_field(
    tmp_path: Path, changes: dict[str, object], field: str
) -> None:
    reports = tmp_path / "reports"
    write_plan(reports, make_plan(**changes))
    with pytest.raises(ArtifactError, match=f"plan-kokoro-82m.json: field '{field}': expected"):
        decide(reports)


def test_a_broken_plan_fails_even_when_the_registry_disables_scaling(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "plan-kokoro-82m.json").write_text("{}")
    with pytest.raises(ArtifactError):
        decide(reports, max_instances=1)


def test_a_plan_that_weighed_instance_types_gates_on_the_chosen_one(tmp_path: Path) -> None:
    from tests.test_plan_candidates import cpu, gpu, weigh

    reports = tmp_path / "reports"
    plan = weigh(gpu(), cpu(0.2)).artifact  # the CPU instance is chosen
    chosen = next(c for c in plan.candidates or () if c.chosen)
    write_plan(reports, plan)
    decision = decide(reports)
    assert decision.autoscaling
    assert decision.plan is not None
    assert decision.plan.max_instances == chosen.max_instances
    assert f"instances {chosen.min_instances}..{chosen.max_instances}" in decision.message
    note = next(n for n in decision.notes if "chose" in n)
    assert "chose ml.c5.xlarge as the cheapest of 2 instance types weighed" in note
    assert "the endpoint runs ml.g5.xlarge" in note
    assert not [n for n in decision.notes if "measured on slug" in n]
