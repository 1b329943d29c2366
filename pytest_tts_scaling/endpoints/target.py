"""What names the endpoint under measurement, and what opening it may do: the one value
:func:`~pytest_tts_scaling.endpoints.factory.open_endpoint` takes, built by a step's inputs."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from pytest_tts_scaling.core.defaults import EndpointKind, endpoint_kind
from pytest_tts_scaling.load.transports import INVOCATION_LIMIT_S


class EndpointTarget(BaseModel):
    """A SageMaker endpoint (`endpoint`), a URL, or the local container (neither)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str | None = None
    endpoint_url: str | None = None
    inference_component: str | None = None
    # The local container's weights folder (None: the container's own choice).
    model_dir: Path | None = None
    # Where a SageMaker endpoint's freeze keeps its snapshot (the artifacts' folder).
    artifacts_dir: Path = Path("reports")
    # Take over a freeze another run left behind.
    force: bool = False
    # How long the first request may take (a URL's; SageMaker's is its own 60 s).
    invocation_limit_s: float = INVOCATION_LIMIT_S

    @property
    def kind(self) -> EndpointKind:
        return endpoint_kind(self.endpoint, self.endpoint_url)
