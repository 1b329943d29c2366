"""The stacks of the app, in dependency order, and the cdk-nag checks over all of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from speech_infra.endpoint import SpeechEndpointStack
from speech_infra.foundation import SpeechFoundationStack
from speech_infra.model_cache import SpeechModelCacheStack
from speech_infra.naming import FOUNDATION_STACK, MODEL_CACHE_STACK, endpoint_stack_name
from speech_infra.plan_gate import decide_scaling
from speech_infra.registry import REGISTRY, ModelEndpointConfig
from speech_infra.settings import AppSettings

# Behaviour the stacks rely on, also when app.py runs without the CLI passing cdk.json's context:
# S3 access-log delivery through a bucket policy (no ACLs), and classic CloudFormation exports,
# so the foundation cannot be deleted while an endpoint stack still uses its bucket and role.
REQUIRED_CONTEXT: dict[str, object] = {
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
    "@aws-cdk/core:defaultCrossStackReferences": "strong",
}


@dataclass(frozen=True)
class SpeechStacks:
    foundation: SpeechFoundationStack
    model_cache: SpeechModelCacheStack
    endpoints: dict[str, SpeechEndpointStack]


def add_speech_stacks(
    app: cdk.App,
    *,
    project_root: Path,
    registry: dict[str, ModelEndpointConfig] | None = None,
) -> SpeechStacks:
    """Foundation → model cache → one endpoint stack per registered model."""
    models = REGISTRY if registry is None else registry
    for key, value in REQUIRED_CONTEXT.items():
        app.node.set_context(key, value)
    settings = AppSettings.from_context(app.node, project_root=project_root)
    foundation = SpeechFoundationStack(app, FOUNDATION_STACK, model_names=list(models))
    model_cache = SpeechModelCacheStack(
        app,
        MODEL_CACHE_STACK,
        weights_bucket=foundation.weights_bucket,
        models=list(models.values()),
    )
    endpoints: dict[str, SpeechEndpointStack] = {}
    for config in models.values():
        stack = SpeechEndpointStack(
            app,
            endpoint_stack_name(config.model_name),
            config=config,
            weights_bucket=foundation.weights_bucket,
            execution_role=foundation.execution_role,
            scaling=decide_scaling(
                config, artifacts_dir=settings.artifacts_dir, project_root=project_root
            ),
            image=settings.image,
            container_dir=settings.container_dir,
        )
        # The weights must be in the bucket before the endpoint's instances download them.
        stack.add_stack_dependency(
            model_cache, reason="the endpoint downloads the weights the model cache syncs"
        )
        endpoints[config.model_name] = stack
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True, reports=True))
    return SpeechStacks(foundation, model_cache, endpoints)
