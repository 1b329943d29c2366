"""The ttotal step: pick the scale timer for the endpoint's kind, then write the artifact.

Both timers (`local`, `sagemaker`) are a `ScaleTimer` (`timer`), sharing its
comparability rule and artifact builder and never importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytest_tts_scaling.artifacts import kept_lines, load, save_keeping
from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact, ttotal_filename
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.endpoints.base import Endpoint
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs
from pytest_tts_scaling.steps.ttotal.timer import TRIGGER, ScaleTimer


def require_qmax_artifact(inputs: TtotalInputs) -> Path:
    """The qmax artifact ttotal reads; refused before anything is started without one."""
    if not inputs.qmax_artifacts:
        raise InputError(
            f"ttotal needs the qmax artifact: expected {both_flags('--qmax-artifact')} FILE"
        )
    if len(inputs.qmax_artifacts) > 1:
        raise InputError(
            f"ttotal measures one instance type: expected one {both_flags('--qmax-artifact')} "
            f"FILE, got {len(inputs.qmax_artifacts)}"
        )
    return inputs.qmax_artifacts[0]


def run_ttotal(
    endpoint: Endpoint,
    inputs: TtotalInputs,
    *,
    progress: Callable[[str], None],
) -> tuple[TtotalArtifact, Path]:
    """Measure T_total on the endpoint the inputs name and write the artifact."""
    qmax = load(require_qmax_artifact(inputs), QmaxArtifact)
    artifact = timer_for(endpoint)(endpoint, qmax, inputs, progress=progress)
    path = inputs.artifacts_dir / ttotal_filename(artifact.model, TRIGGER, artifact.slug)
    for line in kept_lines(save_keeping(artifact, path)):
        progress(f"ttotal: {line}")
    return artifact, path


def timer_for(endpoint: Endpoint) -> ScaleTimer:
    """The scale timer for the endpoint's kind; a plain URL has nothing to scale out."""
    if endpoint.kind == "sagemaker":
        from pytest_tts_scaling.steps.ttotal.sagemaker import measure_sagemaker_ttotal

        return measure_sagemaker_ttotal
    if endpoint.kind == "local":
        from pytest_tts_scaling.steps.ttotal.local import measure_local_ttotal

        return measure_local_ttotal
    raise InputError(
        f"ttotal needs an endpoint it can scale out: the local default or --endpoint NAME; "
        f"{endpoint.name} is a plain URL"
    )


def summary_lines(artifact: TtotalArtifact, path: Path) -> list[str]:
    dominant = next((s for s in artifact.stages if s.stage == artifact.dominant_stage), None)
    share = f" ({dominant.share:.0%} of the span)" if dominant and dominant.share else ""
    return [
        f"ttotal: T_total {artifact.t_total_s:.1f} s = measured {artifact.t_measured_s:.1f} s + "
        f"policy lag bound {artifact.policy_lag_bound_s:.0f} s; dominant stage "
        f"{artifact.dominant_stage}{share}",
        f"ttotal: artifact {path}",
    ]
