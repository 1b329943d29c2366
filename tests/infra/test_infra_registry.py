"""The registry: ModelEndpointConfig's contract and its validation (SPEC §8)."""

from __future__ import annotations

import dataclasses
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


def test_a_pasted_plan_block_builds_a_config() -> None:
    block = ModelEndpointConfig(
        model_name="kokoro-82m",
        instance_type="ml.g5.xlarge",
        min_instances=1,
        max_instances=9,
        scaling_target_value=37.500,
        scale_in_threshold=25.000,
        ttfab_slo_ms=3000,
        queue_max_depth=50,
        scale_out_cooldown_s=30,
        scale_in_cooldown_s=960,
    )
    assert block.hf_repo_id == "hexgrad/Kokoro-82M"
    assert block.variant_name == "AllTraffic"


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
