"""Names shared by the stacks, the CLI and the measurement tools (docs/steps.md,
docs/production.md#deploying).

The endpoint, variant and alarm names are how drift, qmax and validate find what was deployed,
so they are derived here once and nowhere else.
"""

from __future__ import annotations

FOUNDATION_STACK = "SpeechFoundationStack"
MODEL_CACHE_STACK = "SpeechModelCacheStack"
VARIANT_NAME = "AllTraffic"
WEIGHTS_PREFIX = "models"


def endpoint_stack_name(model_name: str) -> str:
    return f"SpeechEndpointStack-{model_name}"


def endpoint_name(model_name: str) -> str:
    return f"speech-{model_name}"


def scaling_resource_id(model_name: str, variant_name: str = VARIANT_NAME) -> str:
    """Application Auto Scaling's id of the variant: `endpoint/NAME/variant/VARIANT`."""
    return f"endpoint/{endpoint_name(model_name)}/variant/{variant_name}"


def weights_key_prefix(model_name: str, revision: str) -> str:
    """Where the model cache puts one pinned revision: `models/{model}/{revision}/`."""
    return f"{WEIGHTS_PREFIX}/{model_name}/{revision}/"


def alarm_name(model_name: str, what: str) -> str:
    return f"{endpoint_name(model_name)}-{what}"
