"""What the doors and the steps agree on without either owning it: the model named by default,
and the kinds of endpoint a run can measure. Pure."""

from __future__ import annotations

from typing import Literal

DEFAULT_MODEL = "kokoro-82m"

EndpointKind = Literal["local", "url", "sagemaker"]
