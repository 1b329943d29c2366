"""SpeechFoundationStack: the weights bucket and the two roles every endpoint uses
(docs/production.md#deploying)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from speech_infra.naming import WEIGHTS_PREFIX, endpoint_name

# The policies a person or role needs around the endpoints, as JSON for any account; their ARNs
# name the partition as `${AWS::Partition}`, which a stack fills in with its own.
IAM_DIR = Path(__file__).resolve().parents[1] / "iam"
PARTITION_PLACEHOLDER = "${AWS::Partition}"


def iam_policy(name: str, partition: str) -> dict[str, Any]:
    """infra/iam/NAME.json with its partition placeholder filled in."""
    text = (IAM_DIR / f"{name}.json").read_text(encoding="utf-8")
    policy: dict[str, Any] = json.loads(text.replace(PARTITION_PLACEHOLDER, partition))
    return policy


def policy_actions(policy: dict[str, Any]) -> list[str]:
    """Every action a policy allows, sorted."""
    found: set[str] = set()
    for statement in policy["Statement"]:
        action = statement["Action"]
        found.update([action] if isinstance(action, str) else action)
    return sorted(found)


# What invoking an endpoint takes (the streams need sagemaker:InvokeEndpoint too).
INVOKE_ACTIONS = tuple(policy_actions(iam_policy("runtime", "aws")))
ENDPOINT_LOG_GROUPS = "/aws/sagemaker/Endpoints/speech-*"


class SpeechFoundationStack(cdk.Stack):
    """Bucket for cached weights, SageMaker execution role, invocation role.

    The bucket (and its access-log bucket) are retained when the stack is deleted: the weights
    are slow to fetch and the logs are an audit trail.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_names: Sequence[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.access_log_bucket = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the only encryption log delivery accepts
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(365))],
        )
        self.weights_bucket = s3.Bucket(
            self,
            "Weights",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            server_access_logs_bucket=self.access_log_bucket,
            server_access_logs_prefix="weights/",
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(noncurrent_version_expiration=cdk.Duration.days(30)),
                s3.LifecycleRule(abort_incomplete_multipart_upload_after=cdk.Duration.days(1)),
            ],
        )

        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="SageMaker execution role of the speech endpoints: read cached weights, "
            "write endpoint logs and metrics. Image pull is granted by each endpoint stack.",
        )
        self._grant_execution(self.execution_role)

        endpoint_arns = [
            self.format_arn(
                service="sagemaker", resource="endpoint", resource_name=endpoint_name(model)
            )
            for model in model_names
        ]
        self.invocation_role = iam.Role(
            self,
            "InvocationRole",
            assumed_by=iam.AccountRootPrincipal(),
            description="Invokes the speech endpoints (plain, response stream, bidirectional "
            "stream) and nothing else.",
        )
        if endpoint_arns:
            self.invocation_role.add_to_policy(
                iam.PolicyStatement(actions=list(INVOKE_ACTIONS), resources=endpoint_arns)
            )

        # tts-bench's own policy (infra/iam/measurement.json) in this stack's partition, to
        # attach to whoever runs the measurements.
        self.measurement_policy = iam.ManagedPolicy(
            self,
            "MeasurementPolicy",
            description="What tts-bench calls around the speech endpoints, and nothing else.",
            document=iam.PolicyDocument.from_json(iam_policy("measurement", self.partition)),
        )
        NagSuppressions.add_resource_suppressions(
            self.measurement_policy,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="Scoped wildcards only: the speech-* endpoints, inference components "
                    "and log groups in any region of the account, the configs and models they "
                    "use (named by CloudFormation), scalable targets limited by namespace and "
                    "dimension by condition (their ids are generated), and the Application Auto "
                    "Scaling and CloudWatch reads, which take no resource.",
                    applies_to=[RegexAppliesTo(regex=r"/^Resource::.*\*.*$/")],
                )
            ],
        )

        cdk.CfnOutput(self, "WeightsBucketName", value=self.weights_bucket.bucket_name)
        cdk.CfnOutput(
            self, "MeasurementPolicyArn", value=self.measurement_policy.managed_policy_arn
        )
        cdk.CfnOutput(self, "ExecutionRoleArn", value=self.execution_role.role_arn)
        cdk.CfnOutput(self, "InvocationRoleArn", value=self.invocation_role.role_arn)

    def _grant_execution(self, role: iam.Role) -> None:
        weights_objects = self.weights_bucket.arn_for_objects(f"{WEIGHTS_PREFIX}/*")
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[weights_objects])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.weights_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{WEIGHTS_PREFIX}/*"]}},
            )
        )
        log_group = self.format_arn(
            service="logs",
            resource="log-group",
            resource_name=ENDPOINT_LOG_GROUPS,
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogGroup", "logs:DescribeLogStreams"], resources=[log_group]
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[f"{log_group}:log-stream:*"],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={
                    "StringEquals": {
                        "cloudwatch:namespace": ["/aws/sagemaker/Endpoints", "TTS/Container"]
                    }
                },
            )
        )
        NagSuppressions.add_resource_suppressions(
            role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="Scoped wildcards only: objects under the bucket's models/ prefix "
                    "(keys depend on the pinned revision), the speech-* endpoints' log groups "
                    "and their streams (stream names are chosen by SageMaker per instance), and "
                    "PutMetricData, which has no resource type and is limited by namespace.",
                    applies_to=[
                        RegexAppliesTo(
                            regex=rf"/^Resource::<Weights\w+\.Arn>\/{WEIGHTS_PREFIX}\/\*$/"
                        ),
                        f"Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:"
                        f"log-group:{ENDPOINT_LOG_GROUPS}",
                        f"Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:"
                        f"log-group:{ENDPOINT_LOG_GROUPS}:log-stream:*",
                        "Resource::*",
                    ],
                )
            ],
            apply_to_children=True,
        )
