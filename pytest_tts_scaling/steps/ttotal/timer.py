"""What both scale timers share: the interface the ttotal step calls, the rule that ttotal probes
what qmax measured, and the artifact a forced scale-out writes.

The local timer (`local`) and the SageMaker one (`sagemaker`) each import this and not each
other; the step's package picks one by the endpoint's kind.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from pytest_tts_scaling import __version__
from pytest_tts_scaling.core.schema import Provenance, QmaxArtifact, TtotalArtifact
from pytest_tts_scaling.core.timeline import Timeline, iso
from pytest_tts_scaling.endpoints.base import Endpoint
from pytest_tts_scaling.errors import MismatchError
from pytest_tts_scaling.steps.qmax import git_commit
from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs

TRIGGER = "forced"


class ScaleTimer(Protocol):
    """Scale `endpoint` from one instance to two under a probe and time every stage."""

    def __call__(
        self,
        endpoint: Endpoint,
        qmax: QmaxArtifact,
        inputs: TtotalInputs,
        *,
        progress: Callable[[str], None],
    ) -> TtotalArtifact: ...


def check_comparable(qmax: QmaxArtifact, endpoint: Endpoint, inputs: TtotalInputs) -> None:
    """ttotal must probe the configuration and transport that qmax measured."""
    transport = inputs.workload.transport
    if transport != qmax.transport:
        raise MismatchError(
            f"field 'transport': the qmax artifact was measured over {qmax.transport}, this run "
            f"uses {transport}; expected --transport {qmax.transport}"
        )
    if qmax.slug != endpoint.slug and not inputs.allow_config_mismatch:
        raise MismatchError(
            f"field 'slug': the qmax artifact is for {qmax.slug}, the endpoint is {endpoint.slug}; "
            "expected the same configuration (or pass --allow-config-mismatch)"
        )


def ttotal_artifact(
    endpoint: Endpoint,
    qmax: QmaxArtifact,
    timeline: Timeline,
    *,
    lag_s: float,
    lag_source: str,
    probe: dict[str, object],
    measured_at: datetime,
) -> TtotalArtifact:
    """The ttotal artifact of a forced scale-out: T_total = measured span + the policy lag bound."""
    return TtotalArtifact(
        model=qmax.model,
        slug=endpoint.slug,
        transport=qmax.transport,
        trigger=TRIGGER,
        weights=qmax.deployed_config.weights,
        t_measured_s=round(timeline.t_measured_s, 3),
        policy_lag_bound_s=lag_s,
        t_total_s=round(timeline.t_measured_s + lag_s, 3),
        bounded=True,
        stages=timeline.stages,
        provenance=Provenance(
            origin=f"{endpoint.kind}:{endpoint.name}",
            run_id=uuid.uuid4().hex,
            measured_at=iso(measured_at),
            tool_version=__version__,
            git_commit=git_commit(),
        ),
        dominant_stage=timeline.dominant_stage,
        policy_lag_source=lag_source,
        probe=probe,
        missing_stages=timeline.missing,
        out_of_order_stages=timeline.out_of_order,
        qmax_run_id=qmax.provenance.run_id,
    )
