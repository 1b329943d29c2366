"""The models this app deploys, one :class:`ModelEndpointConfig` each
(docs/production.md#deploying).

``tts-bench plan`` prints a paste-ready ``"model": ModelEndpointConfig(...)`` entry for
:data:`REGISTRY`. The registry decides *whether* a model may scale (``scaling_enabled``); the
scaling numbers that are synthesized come from the model's plan artifact, read by
:mod:`speech_infra.plan_gate` (one source of truth). The numbers kept here are the last pasted
plan: reviewable in code, used where no plan is trusted (``queue_max_depth``), and compared with
the plan at synthesis time (a difference is a warning, and the plan wins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_MODEL_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,40}[a-z0-9])?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

# Kokoro's weights, config and voices: what the container loads from /opt/ml/model
# (docs/container.md).
KOKORO_FILES = ("config.json", "*.pth", "voices/*.pt")

# Not yet pinned: this checkout could not reach the Hugging Face Hub to read the commit.
# Replace with the 40-hex commit of hexgrad/Kokoro-82M you have reviewed; until then every
# synthesis warns (see ModelEndpointConfig.revision_pinned).
KOKORO_82M_REVISION = "main"


@dataclass(frozen=True)
class ModelEndpointConfig:
    """One model's endpoint. The first ten fields are the plan's contract
    (docs/production.md#deploying)."""

    model_name: str
    instance_type: str
    min_instances: int
    max_instances: int
    scaling_target_value: float
    scale_in_threshold: float
    ttfab_slo_ms: float
    queue_max_depth: int
    scale_out_cooldown_s: int
    scale_in_cooldown_s: int
    # What a deployment needs besides the policy.
    hf_repo_id: str = "hexgrad/Kokoro-82M"
    hf_revision: str = KOKORO_82M_REVISION
    hf_allow_patterns: tuple[str, ...] = field(default=KOKORO_FILES)
    variant_name: str = "AllTraffic"
    container_startup_timeout_s: int = 600
    model_data_download_timeout_s: int = 600

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise ValueError(f"ModelEndpointConfig {self.model_name!r}: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        found: list[str] = []
        if not _MODEL_NAME.match(self.model_name):
            found.append(
                f"model_name must be lowercase letters, digits and '-' (got {self.model_name!r})"
            )
        if not self.instance_type.startswith("ml."):
            found.append(f"instance_type must start with 'ml.' (got {self.instance_type!r})")
        if self.min_instances < 1:
            found.append(f"min_instances must be at least 1 (got {self.min_instances})")
        if self.max_instances < self.min_instances:
            found.append(
                f"max_instances must be >= min_instances "
                f"(got {self.max_instances} < {self.min_instances})"
            )
        if self.scaling_target_value <= 0:
            found.append(f"scaling_target_value must be > 0 (got {self.scaling_target_value})")
        if not 0 <= self.scale_in_threshold < self.scaling_target_value:
            found.append(
                "scale_in_threshold must be >= 0 and below scaling_target_value "
                f"(got {self.scale_in_threshold} vs {self.scaling_target_value})"
            )
        if self.queue_max_depth < 0:
            found.append(
                f"queue_max_depth must be >= 0, 0 = unbounded (got {self.queue_max_depth})"
            )
        if self.scale_out_cooldown_s < 0 or self.scale_in_cooldown_s < 0:
            found.append("cooldowns must be >= 0 seconds")
        if not self.hf_revision:
            found.append("hf_revision must name a commit of the Hugging Face repository")
        if not 60 <= self.container_startup_timeout_s <= 3600:
            found.append("container_startup_timeout_s must be within 60..3600 (SageMaker's range)")
        if not 60 <= self.model_data_download_timeout_s <= 3600:
            found.append(
                "model_data_download_timeout_s must be within 60..3600 (SageMaker's range)"
            )
        return found

    @property
    def scaling_enabled(self) -> bool:
        """Whether this model may scale at all; a plan must still pass the gate."""
        return self.max_instances > self.min_instances

    @property
    def revision_pinned(self) -> bool:
        """True when hf_revision is a full commit id rather than a branch or tag."""
        return bool(_COMMIT.match(self.hf_revision))


REGISTRY: dict[str, ModelEndpointConfig] = {
    # Pasted from `tts-bench plan` on the published method's measurement (docs/method.md; Q_max
    # 50, T_total 320.2 s, SLO 3000 ms): reports/examples/source/plan-kokoro-82m.json's
    # config_block, which a test holds this entry to. The fleet comes from measured throughput,
    # not rps x S / C_scale_max (9).
    "kokoro-82m": ModelEndpointConfig(
        model_name="kokoro-82m",
        instance_type="ml.g5.xlarge",
        min_instances=1,  # trough 10 rps, floor 1; 3 is the smallest safe floor for scale-in
        max_instances=249,  # peak 5000 rps at 20.137 rps per instance
        scaling_target_value=37.5,  # C_scale_max 37.5 x CloudWatch ratio 1.0
        scale_in_threshold=25.0,  # C_scale_min 25 x CloudWatch ratio 1.0
        ttfab_slo_ms=3000,
        queue_max_depth=50,  # the container's admission bound = Q_max
        scale_out_cooldown_s=30,
        scale_in_cooldown_s=960,
    ),
}


def check_registry(registry: dict[str, ModelEndpointConfig]) -> None:
    """Keys must equal model names: the CLI and the stack names use the key."""
    for key, config in registry.items():
        if key != config.model_name:
            raise ValueError(f"registry key {key!r} differs from model_name {config.model_name!r}")


def get_model(
    name: str, registry: dict[str, ModelEndpointConfig] | None = None
) -> ModelEndpointConfig:
    """The model's config, or KeyError naming the known models."""
    models = REGISTRY if registry is None else registry
    try:
        return models[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}. Known models: {', '.join(models)}") from None


check_registry(REGISTRY)
