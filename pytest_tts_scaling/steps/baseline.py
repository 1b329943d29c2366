"""What a qmax result is held against: the --baseline artifact and the --min-qmax floor.

`tts-bench qmax --baseline` and `pytest -m qmax --baseline` apply the same gates in the same order:
the baseline is read and its identity checked before anything is measured (model, transport and
SLO at once, the fingerprint once the endpoint is open), the comparison is made after the ladder.
The baseline is a qmax artifact file, or one kept in MLflow (`mlflow:RUN_ID`, or
`mlflow:experiment=NAME` for that experiment's latest passing qmax run), downloaded first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_tts_scaling.core.compare import Comparison
    from pytest_tts_scaling.core.schema import QmaxArtifact
    from pytest_tts_scaling.endpoints.base import Endpoint
    from pytest_tts_scaling.steps.qmax import LadderResult
    from pytest_tts_scaling.steps.qmax.inputs import GateInputs, QmaxInputs


def load_baseline(inputs: QmaxInputs) -> QmaxArtifact | None:
    """The --baseline artifact, refused early when its model, transport, SLO or the SLO's clock
    is not this run's.

    Read before the ladder starts: the new artifact may be written over the same file. The slug
    is checked by :func:`check_endpoint`; the whole identity again by :func:`compare_with_baseline`.
    """
    from pytest_tts_scaling.artifacts import load
    from pytest_tts_scaling.core.compare import check_clock, check_identity
    from pytest_tts_scaling.core.schema import QmaxArtifact

    gates = inputs.gates
    if gates.baseline is None:
        return None
    if isinstance(gates.baseline, str):
        baseline = fetched_baseline(gates.baseline)
    else:
        baseline = load(gates.baseline, QmaxArtifact)
    names = {"baseline_name": f"baseline {gates.baseline}", "new_name": "this run"}
    check_clock(baseline, inputs.slo.metric, **names)
    check_identity(
        baseline,
        model=inputs.workload.model,
        transport=inputs.workload.transport,
        slo_ms=inputs.slo.ms,
        allow_mismatch=gates.allow_config_mismatch,
        **names,
    )
    return baseline


def fetched_baseline(reference: str) -> QmaxArtifact:
    """The qmax artifact of an MLflow run, read from a download that is removed afterwards; a
    tracking server that cannot be reached refuses the baseline in one line."""
    import tempfile
    from pathlib import Path

    from pytest_tts_scaling.artifacts import load
    from pytest_tts_scaling.core.schema import QmaxArtifact
    from pytest_tts_scaling.errors import InputError
    from pytest_tts_scaling.tracking.mlflow_runs import (
        download_baseline,
        error_line,
        tracking_uri,
    )

    with tempfile.TemporaryDirectory(prefix="tts-baseline-") as folder:
        try:
            path = download_baseline(reference, Path(folder))
        except (InputError, ModuleNotFoundError):
            raise
        except Exception as exc:
            raise InputError(
                f"baseline {reference}: could not read it from MLflow at {tracking_uri()}: "
                f"{error_line(exc)}"
            ) from None
        return load(path, QmaxArtifact)


def check_endpoint(baseline: QmaxArtifact, gates: GateInputs, endpoint: Endpoint) -> None:
    """Refuse a baseline of another fingerprint before freezing and measuring the endpoint."""
    from pytest_tts_scaling.core.compare import check_identity

    check_identity(
        baseline,
        slug=endpoint.slug,
        allow_mismatch=gates.allow_config_mismatch,
        baseline_name=f"baseline {gates.baseline}",
        new_name=f"endpoint {endpoint.name}",
    )


def compare_with_baseline(
    baseline: QmaxArtifact, result: LadderResult, gates: GateInputs
) -> Comparison:
    """The measured ladder against the baseline, as `tts-bench compare` holds them."""
    from pytest_tts_scaling.core.compare import compare_qmax

    return compare_qmax(
        baseline,
        result.artifact,
        tolerance=gates.regression_tolerance,
        allow_config_mismatch=gates.allow_config_mismatch,
        baseline_name=f"baseline {gates.baseline}",
        new_name=str(result.path),
    )


def below_minimum(artifact: QmaxArtifact, gates: GateInputs) -> str | None:
    """Why Q_max fails the --min-qmax floor, or None when it meets it (or none was given)."""
    if gates.min_qmax is None:
        return None
    q_max = artifact.q_max or 0
    if q_max >= gates.min_qmax:
        return None
    from pytest_tts_scaling.core.spelling import both_flags

    return f"Q_max {q_max} is below {both_flags('--min-qmax')} {gates.min_qmax}"
