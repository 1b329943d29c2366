"""The ttotal step: pick the scale timer for the endpoint's kind, then write the artifact.

Above both timers, so the local one (scaletimer) and the SageMaker one (aws/scaleout, which reuses
the local one's marker parsing and artifact builder) do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytest_tts_scaling.artifacts import kept_lines, load, save_keeping
from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact, ttotal_filename
from pytest_tts_scaling.endpoints.base import Endpoint
from pytest_tts_scaling.endpoints.local_scaleout import TRIGGER, measure_local_ttotal
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.option_table import both_flags
from pytest_tts_scaling.options import ResolvedOptions


def require_qmax_artifact(settings: ResolvedOptions) -> Path:
    """The qmax artifact ttotal reads; refused before anything is started without one."""
    if settings.run.qmax_artifact is None:
        raise InputError(
            f"ttotal needs the qmax artifact: expected {both_flags('--qmax-artifact')} FILE"
        )
    return settings.run.qmax_artifact


def run_ttotal(
    endpoint: Endpoint,
    settings: ResolvedOptions,
    *,
    progress: Callable[[str], None],
) -> tuple[TtotalArtifact, Path]:
    """Measure T_total on the endpoint the options name and write the artifact."""
    qmax = load(require_qmax_artifact(settings), QmaxArtifact)
    if endpoint.kind == "sagemaker":
        from pytest_tts_scaling.aws.scaleout import measure_sagemaker_ttotal

        artifact = measure_sagemaker_ttotal(endpoint, qmax, settings, progress=progress)
    elif endpoint.kind == "local":
        artifact = measure_local_ttotal(endpoint, qmax, settings, progress=progress)
    else:
        raise InputError(
            f"ttotal needs an endpoint it can scale out: the local default or --endpoint NAME; "
            f"{endpoint.name} is a plain URL"
        )
    path = settings.run.artifacts_dir / ttotal_filename(artifact.model, TRIGGER, artifact.slug)
    for line in kept_lines(save_keeping(artifact, path)):
        progress(f"ttotal: {line}")
    return artifact, path


def summary_lines(artifact: TtotalArtifact, path: Path) -> list[str]:
    dominant = next((s for s in artifact.stages if s.stage == artifact.dominant_stage), None)
    share = f" ({dominant.share:.0%} of the span)" if dominant and dominant.share else ""
    return [
        f"ttotal: T_total {artifact.t_total_s:.1f} s = measured {artifact.t_measured_s:.1f} s + "
        f"policy lag bound {artifact.policy_lag_bound_s:.0f} s; dominant stage "
        f"{artifact.dominant_stage}{share}",
        f"ttotal: artifact {path}",
    ]
