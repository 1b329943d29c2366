"""The registry: ModelEndpointConfig's contract and its validation
(docs/production.md#deploying)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from speech_infra.registry import REGISTRY, ModelEndpointConfig, check_registry, get_model

CONTRACT = [
    "model_name",
    "instance_type",
    "min_instances",
    "max_instances",
    "scaling_target_value",
    "scale_in_threshold",
    "ttfab_slo_ms",
    "queue_max_depth",
    "scale_out_cooldown_s",
    "scale_in_cooldown_s",
]


def kokoro(**changes: Any) -> ModelEndpointConfig:
    return dataclasses.replace(REGISTRY["kokoro-82m"], **changes)


def test_fields_start_with_the_plan_contract_in_order() -> None:
    names = [f.name for f in dataclasses.fields(ModelEndpointConfig)]
    assert names[: len(CONTRACT)] == CONTRACT
    # Everything after the contract has a default, so a pasted plan block is complete.
    extra = dataclasses.fields(ModelEndpointConfig)[len(CONTRACT) :]
    assert all(f.default is not dataclasses.MISSING for f in extra)


SOURCE_PLAN = Path(__file__).resolve().parents[2] / "reports/examples/source/plan-kokoro-82m.json"


def pasted(plan_path: Path) -> ModelEndpointConfig:
    """The plan artifact's config_block, evaluated as a registry entry is."""
    block = json.loads(plan_path.read_text())["config_block"]
    entry = eval("{" + block + "}", {"ModelEndpointConfig": ModelEndpointConfig})
    (config,) = entry.values()
    assert isinstance(config, ModelEndpointConfig)
    return config


def test_a_pasted_plan_block_builds_a_config() -> None:
    block = pasted(SOURCE_PLAN)
    assert block.hf_repo_id == "hexgrad/Kokoro-82M"
    assert block.variant_name == "AllTraffic"


def test_the_registry_holds_the_committed_plans_values() -> None:
    """Not max_instances=9 (rps x S / C_scale_max, the sizing the plan rejects): the plan's 249."""
    plan = pasted(SOURCE_PLAN)
    config = REGISTRY["kokoro-82m"]
    assert {name: getattr(config, name) for name in CONTRACT} == {
        name: getattr(plan, name) for name in CONTRACT
    }
    assert config.max_instances == 249


def test_kokoro_is_first_on_g5_xlarge() -> None:
    first = next(iter(REGISTRY.values()))
    assert first.model_name == "kokoro-82m"
    assert first.instance_type == "ml.g5.xlarge"


@pytest.mark.parametrize(
    ("min_instances", "max_instances", "enabled"), [(1, 9, True), (1, 1, False), (3, 3, False)]
)
def test_scaling_enabled_iff_max_above_min(
    min_instances: int, max_instances: int, enabled: bool
) -> None:
    config = kokoro(min_instances=min_instances, max_instances=max_instances)
    assert config.scaling_enabled is enabled


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_name": "Kokoro_82M"}, "model_name must be lowercase"),
        ({"instance_type": "g5.xlarge"}, "instance_type must start with 'ml.'"),
        ({"min_instances": 0}, "min_instances must be at least 1"),
        ({"max_instances": 0}, "max_instances must be >= min_instances"),
        ({"scaling_target_value": 0.0}, "scaling_target_value must be > 0"),
        ({"scale_in_threshold": 40.0}, "scale_in_threshold must be >= 0 and below"),
        ({"queue_max_depth": -1}, "queue_max_depth must be >= 0"),
        ({"scale_in_cooldown_s": -5}, "cooldowns must be >= 0"),
        ({"container_startup_timeout_s": 5000}, "container_startup_timeout_s must be within"),
    ],
)
def test_invalid_configs_are_refused_naming_the_field(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        kokoro(**changes)


def test_revision_pinned_only_for_a_full_commit() -> None:
    assert kokoro(hf_revision="0123456789abcdef0123456789abcdef01234567").revision_pinned
    assert not kokoro(hf_revision="main").revision_pinned
    assert not kokoro(hf_revision="v1.0").revision_pinned


def test_registry_keys_must_equal_model_names() -> None:
    with pytest.raises(ValueError, match="registry key 'other' differs"):
        check_registry({"other": kokoro()})


def test_get_model_names_the_known_models() -> None:
    assert get_model("kokoro-82m") is REGISTRY["kokoro-82m"]
    with pytest.raises(KeyError, match=r"unknown model .nope.\. Known models: kokoro-82m"):
        get_model("nope")
