"""What the doors and the steps agree on without either owning it: the model named by default,
and the kinds of endpoint a run can measure. Pure."""

from __future__ import annotations

from typing import Literal

DEFAULT_MODEL = "kokoro-82m"

EndpointKind = Literal["local", "url", "sagemaker"]


def endpoint_kind(endpoint: str | None, endpoint_url: str | None) -> EndpointKind:
    """A SageMaker endpoint by name, else a URL, else the local container."""
    if endpoint:
        return "sagemaker"
    if endpoint_url:
        return "url"
    return "local"
