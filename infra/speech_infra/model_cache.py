"""SpeechModelCacheStack: copy each model's pinned Hugging Face revision into the bucket once.

One CodeBuild project does the copy (``snapshot_download`` at the revision, then ``aws s3 sync``
to ``s3://BUCKET/models/{model}/{revision}/``, uncompressed: the endpoint reads the prefix as
``ModelDataSource``, so no ``model.tar.gz`` is needed). A custom resource per model starts the
build and waits for it (Provider framework with ``isComplete``), keyed on the revision: deploying
again with the same revision does nothing, a new revision syncs into a new prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from speech_infra.naming import WEIGHTS_PREFIX, weights_key_prefix
from speech_infra.registry import ModelEndpointConfig

HANDLERS_DIR = Path(__file__).parent / "handlers"
HANDLER_RUNTIME = lambda_.Runtime.PYTHON_3_14
HUGGINGFACE_HUB = "huggingface_hub==2.4.0"
# CloudFormation gives a custom resource at most an hour (ServiceTimeout, 1..3600 s, one hour
# also when unset), so the whole sync fits inside it: the build's own limit, then the
# provider's wait for it with room for the build's queueing and the last poll, then the
# resource's timeout, set in the template rather than left to the default.
SYNC_BUILD_TIMEOUT = cdk.Duration.minutes(45)
SYNC_WAIT_TIMEOUT = cdk.Duration.minutes(55)
SYNC_SERVICE_TIMEOUT = cdk.Duration.minutes(60)

_DOWNLOAD = (
    "import json, os; from huggingface_hub import snapshot_download; "
    "snapshot_download(repo_id=os.environ['HF_REPO_ID'], revision=os.environ['HF_REVISION'], "
    "local_dir='weights', allow_patterns=json.loads(os.environ['HF_ALLOW_PATTERNS']))"
)

BUILD_SPEC: dict[str, object] = {
    "version": "0.2",
    "env": {"variables": {"HF_HUB_DISABLE_TELEMETRY": "1"}},
    "phases": {
        "install": {
            "runtime-versions": {"python": "3.12"},
            "commands": [f'pip install --quiet --disable-pip-version-check "{HUGGINGFACE_HUB}"'],
        },
        "build": {
            "commands": [
                'echo "sync $HF_REPO_ID@$HF_REVISION -> $S3_URI"',
                f'python -c "{_DOWNLOAD}"',
                "rm -rf weights/.cache",
                "test -f weights/config.json",
                'aws s3 sync weights/ "$S3_URI" --only-show-errors',
                'aws s3 ls "$S3_URI" --recursive --summarize',
            ]
        },
    },
}


class ModelWeightsSync(Construct):
    """The CodeBuild project and the provider that runs it once per model revision."""

    def __init__(self, scope: Construct, construct_id: str, *, weights_bucket: s3.IBucket) -> None:
        super().__init__(scope, construct_id)
        self.weights_bucket = weights_bucket
        self.project = self._project()
        self._suppress_project_findings()
        on_event, is_complete = self._handlers()
        self.provider = self._provider(on_event, is_complete)
        self._suppress_provider_findings()

    def _project(self) -> codebuild.Project:
        """The build that copies one revision: its own log group, writes under models/ only."""
        project = codebuild.Project(
            self,
            "Project",
            description="Copies pinned Hugging Face model revisions into the weights bucket.",
            build_spec=codebuild.BuildSpec.from_object(BUILD_SPEC),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.STANDARD_7_0,
                compute_type=codebuild.ComputeType.SMALL,
            ),
            timeout=SYNC_BUILD_TIMEOUT,
            logging=codebuild.LoggingOptions(
                cloud_watch=codebuild.CloudWatchLoggingOptions(
                    log_group=logs.LogGroup(
                        self, "BuildLogs", retention=logs.RetentionDays.THREE_MONTHS
                    )
                )
            ),
        )
        project.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:AbortMultipartUpload"],
                resources=[self.weights_bucket.arn_for_objects(f"{WEIGHTS_PREFIX}/*")],
            )
        )
        project.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.weights_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{WEIGHTS_PREFIX}/*"]}},
            )
        )
        return project

    def _suppress_project_findings(self) -> None:
        """cdk-nag findings the project answers by design: no artifacts, prefix-scoped writes."""
        NagSuppressions.add_resource_suppressions(
            self.project,
            [
                NagPackSuppression(
                    id="AwsSolutions-CB4",
                    reason="The project produces no build artifacts (NO_ARTIFACTS); what it "
                    "writes goes to the weights bucket, encrypted by that bucket's default "
                    "encryption, and its logs to a CloudWatch log group.",
                ),
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="Weights are written under the bucket's models/ prefix, whose keys "
                    "depend on the model and revision; the log-stream and report-group "
                    "wildcards are the ones aws-cdk-lib grants every project for its own logs "
                    "and reports, scoped to this project's name.",
                    applies_to=[
                        RegexAppliesTo(
                            regex=rf"/^Resource::<Weights\w+\.Arn>\/{WEIGHTS_PREFIX}\/\*$/"
                        ),
                        RegexAppliesTo(
                            regex=r"/^Resource::arn:<AWS::Partition>:logs:<AWS::Region>:"
                            r"<AWS::AccountId>:log-group:\/aws\/codebuild\/<WeightsSyncProject\w+>:\*$/"
                        ),
                        RegexAppliesTo(
                            regex=r"/^Resource::arn:<AWS::Partition>:codebuild:<AWS::Region>:"
                            r"<AWS::AccountId>:report-group\/<WeightsSyncProject\w+>-\*$/"
                        ),
                    ],
                ),
            ],
            apply_to_children=True,
        )

    def _handlers(self) -> tuple[lambda_.Function, lambda_.Function]:
        """The provider's two handlers, one role between them: start a build, then poll it."""
        handler_logs = logs.LogGroup(self, "HandlerLogs", retention=logs.RetentionDays.THREE_MONTHS)
        # One role for both handlers: its own log group and this project's builds, nothing else.
        handler_role = iam.Role(
            self,
            "HandlerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Starts and polls the weights sync builds.",
        )
        handler_logs.grant_write(handler_role)
        handler_role.add_to_policy(
            iam.PolicyStatement(
                actions=["codebuild:StartBuild", "codebuild:BatchGetBuilds"],
                resources=[self.project.project_arn],
            )
        )
        code = lambda_.Code.from_asset(str(HANDLERS_DIR), exclude=["__pycache__", "*.pyc"])
        on_event = lambda_.Function(
            self,
            "StartBuild",
            runtime=HANDLER_RUNTIME,
            code=code,
            handler="weights_sync.on_event",
            role=handler_role,
            log_group=handler_logs,
            timeout=cdk.Duration.minutes(1),
        )
        is_complete = lambda_.Function(
            self,
            "WaitBuild",
            runtime=HANDLER_RUNTIME,
            code=code,
            handler="weights_sync.is_complete",
            role=handler_role,
            log_group=handler_logs,
            timeout=cdk.Duration.minutes(1),
        )
        return on_event, is_complete

    def _provider(self, on_event: lambda_.Function, is_complete: lambda_.Function) -> cr.Provider:
        """The Provider framework around the handlers, its waiter logged in full."""
        return cr.Provider(
            self,
            "Provider",
            on_event_handler=on_event,
            is_complete_handler=is_complete,
            query_interval=cdk.Duration.seconds(30),
            total_timeout=SYNC_WAIT_TIMEOUT,
            log_group=logs.LogGroup(
                self, "ProviderLogs", retention=logs.RetentionDays.THREE_MONTHS
            ),
            disable_waiter_state_machine_logging=False,
            waiter_state_machine_log_options=cr.LogOptions(
                destination=logs.LogGroup(
                    self, "WaiterLogs", retention=logs.RetentionDays.THREE_MONTHS
                ),
                level=sfn.LogLevel.ALL,
            ),
        )

    def _suppress_provider_findings(self) -> None:
        """cdk-nag findings of aws-cdk-lib's Provider framework and its waiter state machine."""
        NagSuppressions.add_resource_suppressions(
            self.provider,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason="The Provider framework's functions are created by aws-cdk-lib with "
                    "AWSLambdaBasicExecutionRole, which only lets them write their own logs.",
                    applies_to=[
                        "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                        "AWSLambdaBasicExecutionRole"
                    ],
                ),
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="aws-cdk-lib's Provider framework invokes the handler functions and "
                    "its own functions by ARN with any version or alias (ARN:*), nothing more.",
                    applies_to=[RegexAppliesTo(regex=r"/^Resource::<WeightsSync\w+\.Arn>:\*$/")],
                ),
                NagPackSuppression(
                    id="AwsSolutions-SF2",
                    reason="The waiter state machine only polls one CodeBuild build; its "
                    "executions are logged in full (level ALL) and tracing would add nothing.",
                ),
            ],
            apply_to_children=True,
        )
        NagSuppressions.add_resource_suppressions(
            self.provider.node.find_child("waiter-state-machine"),
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="The waiter state machine delivers its logs through the CloudWatch Logs "
                    "delivery actions (CreateLogDelivery and related), which take no resource.",
                    applies_to=["Resource::*"],
                )
            ],
            apply_to_children=True,
        )

    def sync(self, config: ModelEndpointConfig) -> cdk.CustomResource:
        """The custom resource that makes ``models/{model}/{revision}/`` exist."""
        prefix = weights_key_prefix(config.model_name, config.hf_revision)
        return cdk.CustomResource(
            self,
            f"Weights-{config.model_name}",
            service_token=self.provider.service_token,
            resource_type="Custom::ModelWeightsSync",
            service_timeout=SYNC_SERVICE_TIMEOUT,
            properties={
                "ProjectName": self.project.project_name,
                "ModelName": config.model_name,
                "RepoId": config.hf_repo_id,
                "Revision": config.hf_revision,
                "AllowPatterns": list(config.hf_allow_patterns),
                "S3Uri": self.weights_bucket.s3_url_for_object(prefix),
            },
        )


class SpeechModelCacheStack(cdk.Stack):
    """One weights sync per registered model, into the foundation's bucket."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        weights_bucket: s3.IBucket,
        models: Sequence[ModelEndpointConfig],
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.weights_sync = ModelWeightsSync(self, "WeightsSync", weights_bucket=weights_bucket)
        self.syncs = {config.model_name: self.weights_sync.sync(config) for config in models}
        for config in models:
            if not config.revision_pinned:
                cdk.Annotations.of(self.syncs[config.model_name]).add_warning_v2(
                    "speech-infra:revision-not-pinned",
                    f"{config.model_name}: hf_revision {config.hf_revision!r} is not a commit id; "
                    "the cache keeps whatever it fetched first. Pin a 40-hex commit of "
                    f"{config.hf_repo_id} in speech_infra/registry.py.",
                )
