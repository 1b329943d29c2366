"""What is deployed: DescribeEndpoint → EndpointConfig → Model, reduced to the fingerprint.

The slug (docs/artifacts.md#files) names the instance type and the image, so artifacts measured on
one configuration are never silently applied to another. With an inference component the model and
image are the component's (DescribeInferenceComponent), the instance type its variant's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_tts_scaling.aws.clients import aws_errors, error_code
from pytest_tts_scaling.core.schema import DeployedConfig, slug_for
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.errors import InputError


class EndpointNotFound(InputError):
    """The named SageMaker endpoint does not exist in this account and region."""


@dataclass(frozen=True)
class VariantState:
    name: str
    current_instance_count: int | None
    desired_instance_count: int | None


@dataclass(frozen=True)
class Deployment:
    """One endpoint as deployed now, with its primary (first) variant's model."""

    endpoint: str
    status: str
    config_name: str
    variants: tuple[VariantState, ...]
    variant: str
    model_name: str
    instance_type: str
    image: str
    image_digest: str
    container_env: dict[str, str] = field(default_factory=dict)
    component: str | None = None

    def deployed_config(self) -> DeployedConfig:
        return DeployedConfig(
            instance_type=self.instance_type,
            image_digest=self.image_digest,
            container_env=dict(self.container_env),
        )

    @property
    def slug(self) -> str:
        return slug_for(self.instance_type, self.image_digest)


# Endpoint and inference-component statuses a wait for InService can no longer leave (RollingBack
# is not one: it ends InService or UpdateRollbackFailed).
TERMINAL_STATUSES = frozenset({"Failed", "UpdateRollbackFailed", "OutOfService", "Deleting"})


def describe_endpoint(sagemaker: Any, name: str) -> dict[str, Any] | None:
    """DescribeEndpoint, or None when the endpoint does not exist."""
    from botocore.exceptions import ClientError

    try:
        response: dict[str, Any] = sagemaker.describe_endpoint(EndpointName=name)
    except ClientError as exc:
        if error_code(exc) in {"ValidationException", "ResourceNotFound"}:
            return None
        raise
    return response


def describe_component(sagemaker: Any, name: str) -> dict[str, Any] | None:
    """DescribeInferenceComponent, or None when the component does not exist."""
    from botocore.exceptions import ClientError

    try:
        response: dict[str, Any] = sagemaker.describe_inference_component(
            InferenceComponentName=name
        )
    except ClientError as exc:
        if error_code(exc) in {"ValidationException", "ResourceNotFound"}:
            return None
        raise
    return response


@dataclass(frozen=True)
class ComponentState:
    """An inference component's status and copy counts, as DescribeInferenceComponent says."""

    name: str
    endpoint: str
    variant: str
    status: str
    current_copy_count: int | None
    desired_copy_count: int | None


def component_state(description: dict[str, Any]) -> ComponentState:
    runtime = description.get("RuntimeConfig") or {}
    return ComponentState(
        name=str(description.get("InferenceComponentName", "")),
        endpoint=str(description.get("EndpointName", "")),
        variant=str(description.get("VariantName", "")),
        status=str(description.get("InferenceComponentStatus", "Unknown")),
        current_copy_count=runtime.get("CurrentCopyCount"),
        desired_copy_count=runtime.get("DesiredCopyCount"),
    )


def variant_states(description: dict[str, Any]) -> tuple[VariantState, ...]:
    return tuple(
        VariantState(
            name=v["VariantName"],
            current_instance_count=v.get("CurrentInstanceCount"),
            desired_instance_count=v.get("DesiredInstanceCount"),
        )
        for v in description.get("ProductionVariants", [])
    )


def image_digest(image_uri: str, deployed_images: list[dict[str, Any]] | None = None) -> str:
    """The resolved digest SageMaker deployed, else the URI's own digest, else its tag.

    `repo@sha256:ab…` → `sha256:ab…`; `repo:v3` → `v3`; a URI with neither → `latest`.
    """
    for image in deployed_images or []:
        resolved = str(image.get("ResolvedImage", ""))
        if "@" in resolved:
            return resolved.rsplit("@", 1)[1]
    if "@" in image_uri:
        return image_uri.rsplit("@", 1)[1]
    last = image_uri.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


def read_deployment(sagemaker: Any, name: str, component: str | None = None) -> Deployment:
    """Follow the endpoint to its config and model; one-line errors for what cannot be measured.

    With `component`, the model, image and environment are the inference component's and the
    variant is the one it runs on.
    """
    with aws_errors():
        description = describe_endpoint(sagemaker, name)
        if description is None:
            raise EndpointNotFound(
                f"endpoint {name!r} not found: expected a SageMaker endpoint in this account and "
                "region (check AWS_REGION / the profile)"
            )
        config_name = description["EndpointConfigName"]
        config = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)
        config_variants = config.get("ProductionVariants", [])
        if not config_variants:
            raise InputError(
                f"endpoint config {config_name!r}: field 'ProductionVariants' is empty"
            )
        if component:
            return _component_deployment(sagemaker, name, description, config_variants, component)
        primary = config_variants[0]
        instance_type = _instance_type(name, primary)
        model_name = primary.get("ModelName")
        if not model_name:
            raise InputError(
                f"endpoint {name!r} variant {primary['VariantName']!r}: no ModelName (an "
                f"endpoint of inference components: expected {both_flags('--inference-component')}"
                " NAME)"
            )
        model = sagemaker.describe_model(ModelName=model_name)
    container = model.get("PrimaryContainer") or (model.get("Containers") or [{}])[0]
    deployed_variant: dict[str, Any] = next(
        (
            v
            for v in description.get("ProductionVariants", [])
            if v.get("VariantName") == primary["VariantName"]
        ),
        {},
    )
    image = str(container.get("Image", ""))
    return Deployment(
        endpoint=name,
        status=str(description.get("EndpointStatus", "Unknown")),
        config_name=config_name,
        variants=variant_states(description),
        variant=primary["VariantName"],
        model_name=model_name,
        instance_type=instance_type,
        image=image,
        image_digest=image_digest(image, deployed_variant.get("DeployedImages")),
        container_env=_env(container.get("Environment")),
    )


def _instance_type(endpoint: str, variant: dict[str, Any]) -> str:
    instance_type = variant.get("InstanceType")
    if not instance_type:
        raise InputError(
            f"endpoint {endpoint!r} variant {variant['VariantName']!r}: no InstanceType "
            "(serverless variants are not measured per instance)"
        )
    return str(instance_type)


def _env(raw: dict[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


def _component_deployment(
    sagemaker: Any,
    name: str,
    description: dict[str, Any],
    config_variants: list[dict[str, Any]],
    component: str,
) -> Deployment:
    found = describe_component(sagemaker, component)
    if found is None:
        raise InputError(
            f"inference component {component!r} not found: expected a component of endpoint "
            f"{name!r} (see `aws sagemaker list-inference-components --endpoint-name-equals "
            f"{name}`)"
        )
    state = component_state(found)
    if state.endpoint != name:
        raise InputError(
            f"inference component {component!r} runs on endpoint {state.endpoint!r}, not "
            f"{name!r}: expected --endpoint {state.endpoint}"
        )
    variant = next((v for v in config_variants if v["VariantName"] == state.variant), None)
    if variant is None:
        raise InputError(
            f"inference component {component!r}: its variant {state.variant!r} is not in "
            f"endpoint config {description['EndpointConfigName']!r}"
        )
    spec = found.get("Specification") or {}
    container = spec.get("Container") or {}
    model_name = str(spec.get("ModelName") or "")
    env: dict[str, str] = {}
    image = ""
    if model_name:
        model = sagemaker.describe_model(ModelName=model_name)
        model_container = model.get("PrimaryContainer") or (model.get("Containers") or [{}])[0]
        env = _env(model_container.get("Environment"))
        image = str(model_container.get("Image", ""))
    env.update(_env(container.get("Environment")))
    deployed_image = container.get("DeployedImage") or {}
    image = str(deployed_image.get("SpecifiedImage") or image)
    if not image:
        raise InputError(
            f"inference component {component!r}: neither a model nor a container image in its "
            "Specification"
        )
    return Deployment(
        endpoint=name,
        status=str(description.get("EndpointStatus", "Unknown")),
        config_name=str(description["EndpointConfigName"]),
        variants=variant_states(description),
        variant=state.variant,
        model_name=model_name or component,
        instance_type=_instance_type(name, variant),
        image=image,
        image_digest=image_digest(image, [deployed_image] if deployed_image else None),
        container_env=env,
        component=component,
    )
