"""The gate: whether a model's endpoint gets autoscaling, decided from its plan artifact
(docs/production.md#deploying).

Autoscaling (and the observability that watches it) is synthesized only when the registry allows
the model to scale (``max_instances > min_instances``) **and** ``{artifacts_dir}/plan-{model}.json``
exists with a verdict other than ``stop``. The plan is read through the plugin's schema module,
the one definition of the artifact format. A plan that exists but cannot be read, or whose numbers
cannot describe a policy, fails synthesis with :class:`ArtifactError`: a broken plan must never
quietly turn into an endpoint without scaling.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_tts_scaling.artifacts import load
from pytest_tts_scaling.core.schema import PlanArtifact, plan_filename
from pytest_tts_scaling.errors import ArtifactError
from speech_infra.registry import ModelEndpointConfig


@dataclass(frozen=True)
class ScalingDecision:
    """What the gate found for one model.

    ``plan`` is the trusted plan (verdict ok or warn), also when autoscaling stays out because the
    registry disables it: its measured ``queue_max_depth`` still configures the container.
    """

    model_name: str
    plan_path: Path
    plan: PlanArtifact | None
    autoscaling: bool
    reason: str
    notes: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """The line printed at synthesis, e.g. ``kokoro-82m: autoscaling left out: no plan …``."""
        verb = "autoscaling from" if self.autoscaling else "autoscaling left out:"
        return f"{self.model_name}: {verb} {self.reason}"


def display_path(path: Path, project_root: Path) -> str:
    """The path as a user would type it from the repository root."""
    try:
        return str(path.relative_to(project_root))
    except ValueError:
        return str(path)


def plan_path_for(model_name: str, artifacts_dir: Path) -> Path:
    return artifacts_dir / plan_filename(model_name)


def decide_scaling(
    config: ModelEndpointConfig, *, artifacts_dir: Path, project_root: Path
) -> ScalingDecision:
    """Read the model's plan (if any) and decide. Raises ArtifactError for a broken plan."""
    path = plan_path_for(config.model_name, artifacts_dir)
    shown = display_path(path, project_root)
    plan = _read_plan(path, config) if path.exists() else None

    def left_out(reason: str, trusted: PlanArtifact | None = None) -> ScalingDecision:
        notes = _differences(config, trusted, shown) if trusted else ()
        return ScalingDecision(config.model_name, path, trusted, False, reason, notes)

    if plan is not None and plan.verdict == "stop":
        stops = (
            ", ".join(f.name for f in plan.findings if f.verdict == "stop") or "no finding named"
        )
        return left_out(
            f"plan {shown} has verdict stop ({stops}); "
            "fix what it reports and re-run tts-bench plan"
        )
    if plan is not None:
        _check_policy_values(plan, shown)
    if not config.scaling_enabled:
        return left_out(
            f"scaling disabled in the registry (max_instances {config.max_instances} is not above "
            f"min_instances {config.min_instances})",
            plan,
        )
    if plan is None:
        return left_out(f"no plan at {shown} (run tts-bench plan)")
    if plan.max_instances <= plan.min_instances:
        return left_out(
            f"plan {shown} fixes the fleet at {plan.min_instances} instance(s) "
            "(max_instances is not above min_instances)",
            plan,
        )
    reason = (
        f"{shown} (verdict {plan.verdict}): target {plan.scaling_target_value:g}, "
        f"scale-in {plan.scale_in_threshold:g}, cooldowns {plan.scale_out_cooldown_s}/"
        f"{plan.scale_in_cooldown_s} s, instances {plan.min_instances}..{plan.max_instances}"
    )
    return ScalingDecision(
        config.model_name, path, plan, True, reason, _differences(config, plan, shown)
    )


def _read_plan(path: Path, config: ModelEndpointConfig) -> PlanArtifact:
    plan = load(path, PlanArtifact)
    if plan.model != config.model_name:
        raise ArtifactError(
            f"{path}: field 'model': expected {config.model_name!r}, got {plan.model!r}"
        )
    return plan


def _check_policy_values(plan: PlanArtifact, shown: str) -> None:
    """Values a policy cannot be built from; the schema alone does not rule them out."""

    def fail(field: str, expected: str, got: object) -> None:
        raise ArtifactError(f"{shown}: field '{field}': expected {expected}, got {got!r}")

    if plan.min_instances < 1:
        fail("min_instances", "at least 1", plan.min_instances)
    if plan.max_instances < plan.min_instances:
        fail("max_instances", f">= min_instances ({plan.min_instances})", plan.max_instances)
    if plan.scaling_target_value <= 0:
        fail("scaling_target_value", "> 0", plan.scaling_target_value)
    if not 0 <= plan.scale_in_threshold < plan.scaling_target_value:
        fail(
            "scale_in_threshold",
            f">= 0 and below scaling_target_value ({plan.scaling_target_value:g})",
            plan.scale_in_threshold,
        )
    if plan.scale_out_cooldown_s < 0:
        fail("scale_out_cooldown_s", ">= 0", plan.scale_out_cooldown_s)
    if plan.scale_in_cooldown_s < 0:
        fail("scale_in_cooldown_s", ">= 0", plan.scale_in_cooldown_s)
    if plan.queue_max_depth < 0:
        fail("queue_max_depth", ">= 0 (0 = unbounded)", plan.queue_max_depth)
    if plan.first_chunk_alarm_ms <= 0:
        fail("first_chunk_alarm_ms", "> 0", plan.first_chunk_alarm_ms)


_COMPARED = (
    "min_instances",
    "max_instances",
    "scaling_target_value",
    "scale_in_threshold",
    "queue_max_depth",
    "scale_out_cooldown_s",
    "scale_in_cooldown_s",
)


def _differences(config: ModelEndpointConfig, plan: PlanArtifact, shown: str) -> tuple[str, ...]:
    """Warnings: the registry lags the plan, or the plan was measured on other hardware."""
    notes: list[str] = []
    differing = [
        f"{name} {getattr(config, name):g} -> {getattr(plan, name):g}"
        for name in _COMPARED
        if getattr(config, name) != getattr(plan, name)
    ]
    if differing:
        notes.append(
            f"registry entry differs from {shown} ({', '.join(differing)}); the plan is used: "
            "paste its config_block into speech_infra/registry.py"
        )
    kind = config.instance_type.removeprefix("ml.").replace(".", "")
    if plan.candidates and plan.instance_type != config.instance_type:
        notes.append(
            f"{shown} chose {plan.instance_type} as the cheapest of {len(plan.candidates)} "
            f"instance types weighed, but the endpoint runs {config.instance_type}: its thresholds "
            "and fleet are the chosen type's; paste its config_block into speech_infra/registry.py"
        )
    elif plan.slug.split("-", 1)[0] != kind:
        notes.append(
            f"{shown} was measured on slug {plan.slug!r}, but the endpoint runs "
            f"{config.instance_type}: re-measure on that instance type"
        )
    slo = plan.inputs.slo_ms
    if slo is not None and slo != config.ttfab_slo_ms:
        notes.append(
            f"{shown} was planned for SLO {slo:g} ms, registry says {config.ttfab_slo_ms:g}"
        )
    return tuple(notes)
