"""SpeechEndpointStack: one model's image, SageMaker model, endpoint config and endpoint.

Autoscaling and its observability are added only when the plan gate says so
(:mod:`speech_infra.plan_gate`); otherwise the stack carries a warning saying why, and the same
line is printed at synthesis.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from pytest_tts_scaling.core.schema import PlanArtifact
from speech_infra.ami import image_cuda, inference_ami_version, is_gpu_instance
from speech_infra.autoscaling import EndpointAutoscaling
from speech_infra.naming import endpoint_name, weights_key_prefix
from speech_infra.observability import EndpointObservability
from speech_infra.plan_gate import ScalingDecision
from speech_infra.registry import ModelEndpointConfig
from speech_infra.settings import EcrImage


class SpeechEndpointStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ModelEndpointConfig,
        weights_bucket: s3.IBucket,
        execution_role: iam.IRole,
        scaling: ScalingDecision,
        image: EcrImage | None,
        container_dir: Path,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.scaling = scaling
        plan = scaling.plan
        queue_max_depth = plan.queue_max_depth if plan else config.queue_max_depth

        image_uri, repository_arn = self._image(image, container_dir)
        pull = self._image_pull(execution_role, repository_arn)
        self.model = self._model(image_uri, execution_role, weights_bucket, queue_max_depth)
        self.model.node.add_dependency(pull)
        self.endpoint_config = self._endpoint_config(container_dir)
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=endpoint_name(config.model_name),
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            # With autoscaling, a redeploy must keep the instance count the policy chose instead
            # of resetting it to InitialInstanceCount.
            retain_all_variant_properties=True if scaling.autoscaling else None,
        )
        self.autoscaling: EndpointAutoscaling | None = None
        self.observability: EndpointObservability | None = None
        if scaling.autoscaling and plan is not None:
            self.autoscaling, self.observability = self._scaling(plan)
        self._say_scaling()

        cdk.CfnOutput(self, "EndpointName", value=self.endpoint.attr_endpoint_name)
        cdk.CfnOutput(self, "QueueMaxDepth", value=str(queue_max_depth))

    def _image_pull(self, execution_role: iam.IRole, repository_arn: str) -> iam.Policy:
        """The execution role's right to pull the image: its one repository, and a token."""
        pull = iam.Policy(
            self,
            "ImagePull",
            roles=[execution_role],
            statements=[
                iam.PolicyStatement(
                    actions=[
                        "ecr:BatchGetImage",
                        "ecr:GetDownloadUrlForLayer",
                        "ecr:BatchCheckLayerAvailability",
                    ],
                    resources=[repository_arn],
                ),
                iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            ],
        )
        NagSuppressions.add_resource_suppressions(
            pull,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="ecr:GetAuthorizationToken has no resource type and must be granted on "
                    "*; image reads are limited to the one repository holding the image.",
                    applies_to=["Resource::*"],
                )
            ],
        )
        return pull

    def _model(
        self,
        image_uri: str,
        execution_role: iam.IRole,
        weights_bucket: s3.IBucket,
        queue_max_depth: int,
    ) -> sagemaker.CfnModel:
        """The SageMaker model: the image, its settings, and the weights' S3 prefix."""
        config = self.config
        return sagemaker.CfnModel(
            self,
            "Model",
            execution_role_arn=execution_role.role_arn,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image_uri,
                environment={
                    "MODEL_NAME": config.model_name,
                    "QUEUE_MAX_DEPTH": str(queue_max_depth),
                    # On a GPU instance the container refuses to serve on CPU (tts_container.device)
                    "INSTANCE_TYPE": config.instance_type,
                },
                model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                    s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                        s3_uri=weights_bucket.s3_url_for_object(
                            weights_key_prefix(config.model_name, config.hf_revision)
                        ),
                        s3_data_type="S3Prefix",
                        compression_type="None",
                    )
                ),
            ),
        )

    def _endpoint_config(self, container_dir: Path) -> sagemaker.CfnEndpointConfig:
        """One variant, started at the plan's minimum when it scales, else the registry's."""
        config, scaling = self.config, self.scaling
        plan = scaling.plan
        initial_count = plan.min_instances if scaling.autoscaling and plan else config.min_instances
        ami_version = self._ami_version(config.instance_type, container_dir)
        variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=config.variant_name,
            model_name=self.model.attr_model_name,
            instance_type=config.instance_type,
            initial_instance_count=initial_count,
            initial_variant_weight=1.0,
            container_startup_health_check_timeout_in_seconds=config.container_startup_timeout_s,
            model_data_download_timeout_in_seconds=config.model_data_download_timeout_s,
            routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(
                routing_strategy="LEAST_OUTSTANDING_REQUESTS"
            ),
            inference_ami_version=ami_version,
        )
        return sagemaker.CfnEndpointConfig(
            self,
            "EndpointConfig",
            production_variants=[variant],
        )

    def _scaling(self, plan: PlanArtifact) -> tuple[EndpointAutoscaling, EndpointObservability]:
        """The plan's scaling policy on the endpoint, and the dashboard and alarms that watch it."""
        config = self.config
        autoscaling = EndpointAutoscaling(
            self,
            "Autoscaling",
            model_name=config.model_name,
            variant_name=config.variant_name,
            plan=plan,
            endpoint=self.endpoint,
        )
        observability = EndpointObservability(
            self,
            "Observability",
            model_name=config.model_name,
            variant_name=config.variant_name,
            plan=plan,
        )
        return autoscaling, observability

    def _say_scaling(self) -> None:
        """The plan gate's decision and notes: on the stack for `cdk`, and printed at synthesis."""
        scaling = self.scaling
        if self.autoscaling is not None:
            cdk.Annotations.of(self).add_info(scaling.message)
        else:
            cdk.Annotations.of(self).add_warning_v2(
                "speech-infra:autoscaling-left-out", scaling.message
            )
        for index, note in enumerate(scaling.notes):
            cdk.Annotations.of(self).add_warning_v2(f"speech-infra:plan-note-{index}", note)
        print(scaling.message, file=sys.stderr)
        for note in scaling.notes:
            print(f"{self.config.model_name}: warning: {note}", file=sys.stderr)

    def _ami_version(self, instance_type: str, container_dir: Path) -> str | None:
        """A driver for the image's CUDA on GPU instances (speech_infra.ami); else the default."""
        dockerfile = container_dir / "Dockerfile"
        if not is_gpu_instance(instance_type):
            return None
        if not dockerfile.is_file():
            cdk.Annotations.of(self).add_warning_v2(
                "speech-infra:ami-unknown",
                f"no {dockerfile} to read the image's CUDA from: InferenceAmiVersion is left to "
                "SageMaker's default, whose driver may not run the image's CUDA",
            )
            return None
        return inference_ami_version(instance_type, image_cuda(dockerfile))

    def _image(self, image: EcrImage | None, container_dir: Path) -> tuple[str, str]:
        """The image URI and its repository ARN: the prebuilt override, or container/ as asset."""
        if image is not None:
            arn = cdk.Arn.format(
                cdk.ArnComponents(
                    service="ecr",
                    resource="repository",
                    resource_name=image.repository,
                    account=image.account,
                    region=image.region,
                ),
                self,
            )
            return image.uri, arn
        if not (container_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"no Dockerfile in {container_dir}: build the container image there, or pass a "
                "prebuilt one with -c image_uri=ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG"
            )
        asset = ecr_assets.DockerImageAsset(
            self,
            "Image",
            directory=str(container_dir),
            platform=ecr_assets.Platform.LINUX_AMD64,
            exclude=["tests", "**/__pycache__", "**/*.pyc", ".venv"],
        )
        return asset.image_uri, asset.repository.repository_arn
