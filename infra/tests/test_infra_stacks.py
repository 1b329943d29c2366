"""The synthesized stacks: foundation, model cache, endpoint, and the plan gate's effect on them."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Match
from infra_helpers import (
    IMAGE_URI,
    MODEL,
    Synth,
    SynthFactory,
    actions_of,
    flatten,
    resources,
    statements,
)
from speech_infra.registry import REGISTRY
from speech_infra.settings import AppSettings

from pytest_tts_scaling.errors import ArtifactError
from tests.aws.aws_calls import call_sites

ROOT = Path(__file__).resolve().parents[2]
HIGH_RES_CONCURRENCY = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
SCALING_KINDS = (
    "AWS::ApplicationAutoScaling::ScalableTarget",
    "AWS::ApplicationAutoScaling::ScalingPolicy",
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::Dashboard",
)


def only(found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    assert len(found) == 1, list(found)
    return next(iter(found.values()))


def model_env(synth: Synth) -> dict[str, str]:
    model = only(resources(synth.endpoint, "AWS::SageMaker::Model"))
    env: dict[str, str] = model["Properties"]["PrimaryContainer"]["Environment"]
    return env


# --- the app as a whole ---------------------------------------------------------------------


def test_app_has_foundation_cache_and_one_endpoint_stack_per_model(no_plan: Synth) -> None:
    assert no_plan.stack_names() == [
        "SpeechFoundationStack",
        "SpeechModelCacheStack",
        *(f"SpeechEndpointStack-{name}" for name in REGISTRY),
    ]


def test_endpoint_stack_is_deployed_after_foundation_and_cache(no_plan: Synth) -> None:
    manifest = json.loads((no_plan.outdir / "manifest.json").read_text())
    endpoint_deps = manifest["artifacts"][f"SpeechEndpointStack-{MODEL}"]["dependencies"]
    cache_deps = manifest["artifacts"]["SpeechModelCacheStack"]["dependencies"]
    assert {"SpeechFoundationStack", "SpeechModelCacheStack"} <= set(endpoint_deps)
    assert "SpeechFoundationStack" in cache_deps


# --- foundation -----------------------------------------------------------------------------


def test_buckets_are_encrypted_private_ssl_only_and_retained(no_plan: Synth) -> None:
    template = no_plan.foundation
    buckets = resources(template, "AWS::S3::Bucket")
    assert len(buckets) == 2  # weights + their access logs
    for bucket in buckets.values():
        assert bucket["DeletionPolicy"] == "Retain"
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    template.resource_properties_count_is(
        "AWS::S3::BucketPolicy",
        Match.object_like(
            {
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Action": "s3:*",
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            )
                        ]
                    )
                }
            }
        ),
        2,
    )


def test_weights_bucket_is_versioned_and_logs_access(no_plan: Synth) -> None:
    no_plan.foundation.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "VersioningConfiguration": {"Status": "Enabled"},
            "LoggingConfiguration": {
                "DestinationBucketName": Match.any_value(),
                "LogFilePrefix": "weights/",
            },
        },
    )


def test_execution_role_reads_weights_and_writes_endpoint_logs_only(no_plan: Synth) -> None:
    template = no_plan.foundation
    roles = resources(template, "AWS::IAM::Role")
    execution = [
        role
        for role in roles.values()
        if "sagemaker.amazonaws.com" in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
    ]
    assert len(execution) == 1
    granted = {
        action: flatten(statement["Resource"])
        for statement in statements(template)
        for action in actions_of(statement)
        if not action.startswith("sagemaker:")
    }
    assert set(granted) == {
        "s3:GetObject",
        "s3:ListBucket",
        "logs:CreateLogGroup",
        "logs:DescribeLogStreams",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "cloudwatch:PutMetricData",
    }
    assert granted["s3:GetObject"].endswith("/models/*")
    assert "log-group:/aws/sagemaker/Endpoints/speech-*" in granted["logs:PutLogEvents"]
    # No write access to the weights, no managed policies.
    for role in roles.values():
        assert "ManagedPolicyArns" not in role["Properties"]


def test_invocation_role_invokes_only_the_speech_endpoints(no_plan: Synth) -> None:
    invoke = [
        statement
        for statement in statements(no_plan.foundation)
        if any(action.startswith("sagemaker:") for action in actions_of(statement))
    ]
    assert len(invoke) == 1
    (statement,) = invoke
    assert sorted(actions_of(statement)) == [
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithBidirectionalStream",
        "sagemaker:InvokeEndpointWithResponseStream",
    ]
    targets = statement["Resource"]
    targets = [targets] if not isinstance(targets, list) else targets
    assert [flatten(t).rsplit(":", 1)[-1] for t in targets] == [
        f"endpoint/speech-{name}" for name in REGISTRY
    ]


def _statements_by_sid(document: dict[str, Any]) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}
    for statement in document["Statement"]:
        targets = statement["Resource"]
        targets = targets if isinstance(targets, list) else [targets]
        out[statement["Sid"]] = (
            statement["Effect"],
            sorted(actions_of(statement)),
            sorted(flatten(t) for t in targets),
            json.dumps(statement.get("Condition"), sort_keys=True),
        )
    return out


def test_the_measurement_policy_is_deployed_in_the_stacks_partition(no_plan: Synth) -> None:
    """infra/iam/measurement.json as a managed policy, its `${AWS::Partition}` the stack's own
    (a Ref, not the text `aws`), its ARN an output to attach it by."""
    (managed,) = resources(no_plan.foundation, "AWS::IAM::ManagedPolicy").values()
    document = managed["Properties"]["PolicyDocument"]
    assert "arn:aws:" not in json.dumps(document)
    assert {"Ref": "AWS::Partition"} in json.loads(
        json.dumps(document["Statement"][0]["Resource"][0])
    )["Fn::Join"][1]
    expected = json.loads((ROOT / "infra" / "iam" / "measurement.json").read_text())
    assert _statements_by_sid(document) == _statements_by_sid(expected)
    assert "MeasurementPolicyArn" in no_plan.foundation.to_json()["Outputs"]


# --- model cache ----------------------------------------------------------------------------


def test_codebuild_syncs_the_pinned_revision_into_the_model_prefix(no_plan: Synth) -> None:
    project = only(resources(no_plan.model_cache, "AWS::CodeBuild::Project"))
    spec = json.loads(project["Properties"]["Source"]["BuildSpec"])
    commands = "\n".join(
        spec["phases"]["install"]["commands"] + spec["phases"]["build"]["commands"]
    )
    assert "pip install" in commands
    assert "huggingface_hub==" in commands
    assert "snapshot_download(repo_id=os.environ['HF_REPO_ID']" in commands
    assert "revision=os.environ['HF_REVISION']" in commands
    assert 'aws s3 sync weights/ "$S3_URI"' in commands


def test_one_sync_per_model_keyed_on_its_revision(no_plan: Synth) -> None:
    syncs = resources(no_plan.model_cache, "Custom::ModelWeightsSync")
    assert len(syncs) == len(REGISTRY)
    config = REGISTRY[MODEL]
    props = next(
        sync["Properties"] for sync in syncs.values() if sync["Properties"]["ModelName"] == MODEL
    )
    assert props["RepoId"] == "hexgrad/Kokoro-82M"
    assert props["Revision"] == config.hf_revision
    assert props["AllowPatterns"] == list(config.hf_allow_patterns)
    assert flatten(props["S3Uri"]).endswith(f"/models/{MODEL}/{config.hf_revision}/")


def test_the_sync_fits_inside_the_custom_resources_explicit_timeout(no_plan: Synth) -> None:
    """CloudFormation waits at most ServiceTimeout (1..3600 s, an hour when unset) for the
    resource: the build and the provider's wait for it both end before that."""
    timeouts = {
        int(s["Properties"]["ServiceTimeout"])
        for s in resources(no_plan.model_cache, "Custom::ModelWeightsSync").values()
    }
    assert timeouts == {3600}
    build_s = (
        60
        * only(resources(no_plan.model_cache, "AWS::CodeBuild::Project"))["Properties"][
            "TimeoutInMinutes"
        ]
    )
    machine = only(resources(no_plan.model_cache, "AWS::StepFunctions::StateMachine"))
    definition = flatten(machine["Properties"]["DefinitionString"])
    attempts = int(re.search(r'"MaxAttempts":(\d+)', definition).group(1))  # type: ignore[union-attr]
    interval = int(re.search(r'"IntervalSeconds":(\d+)', definition).group(1))  # type: ignore[union-attr]
    wait_s = attempts * interval
    assert build_s < wait_s < 3600


def test_sync_handlers_may_only_start_and_read_builds(no_plan: Synth) -> None:
    codebuild = [
        statement
        for statement in statements(no_plan.model_cache)
        if any(action.startswith("codebuild:") for action in actions_of(statement))
        and "codebuild:CreateReport" not in actions_of(statement)
    ]
    (statement,) = codebuild
    # Exactly the operations the handler's source calls (tests/aws/aws_calls.py reads them).
    handler = ROOT / "infra" / "speech_infra" / "handlers"
    called = sorted({f"codebuild:{site.operation}" for site in call_sites((handler,))})
    assert called == ["codebuild:BatchGetBuilds", "codebuild:StartBuild"]
    assert sorted(actions_of(statement)) == called
    assert "Arn" in flatten(statement["Resource"])  # the project's ARN, not "*"


def test_codebuild_writes_weights_but_never_deletes_them(no_plan: Synth) -> None:
    writes = {
        action
        for statement in statements(no_plan.model_cache)
        for action in actions_of(statement)
        if action.startswith("s3:")
    }
    assert writes == {"s3:PutObject", "s3:AbortMultipartUpload", "s3:ListBucket"}


def revision_warnings(synth: Synth) -> list[str]:
    return [text for _, text in synth.messages("warning") if "is not a commit id" in text]


def test_an_unpinned_revision_is_a_warning(synth_app: SynthFactory, tmp_path: Path) -> None:
    branch = {MODEL: dataclasses.replace(REGISTRY[MODEL], hf_revision="main")}
    synth = synth_app("branch", artifacts_dir=tmp_path, registry=branch)
    (warning,) = revision_warnings(synth)
    assert "hf_revision 'main' is not a commit id" in warning
    assert "Pin a 40-hex commit of hexgrad/Kokoro-82M" in warning


def test_a_pinned_revision_is_not_a_warning(synth_app: SynthFactory, tmp_path: Path) -> None:
    commit = {MODEL: dataclasses.replace(REGISTRY[MODEL], hf_revision="0123abcd" * 5)}
    synth = synth_app("commit", artifacts_dir=tmp_path, registry=commit)
    assert revision_warnings(synth) == []


# --- endpoint without a plan ----------------------------------------------------------------


def test_model_runs_the_image_on_the_cached_weights(no_plan: Synth) -> None:
    model = only(resources(no_plan.endpoint, "AWS::SageMaker::Model"))
    container = model["Properties"]["PrimaryContainer"]
    assert container["Image"] == IMAGE_URI
    source = container["ModelDataSource"]["S3DataSource"]
    assert source["S3DataType"] == "S3Prefix"
    assert source["CompressionType"] == "None"
    revision = REGISTRY[MODEL].hf_revision
    assert flatten(source["S3Uri"]).endswith(f"/models/{MODEL}/{revision}/")
    assert "SpeechFoundationStack" in flatten(source["S3Uri"])  # the foundation's bucket


def test_without_a_plan_queue_depth_comes_from_the_registry(no_plan: Synth) -> None:
    assert model_env(no_plan) == {
        "MODEL_NAME": MODEL,
        "QUEUE_MAX_DEPTH": str(REGISTRY[MODEL].queue_max_depth),
        "INSTANCE_TYPE": "ml.g5.xlarge",
    }


def test_endpoint_config_routes_to_least_outstanding_requests(no_plan: Synth) -> None:
    no_plan.endpoint.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": [
                Match.object_like(
                    {
                        "VariantName": "AllTraffic",
                        "InstanceType": "ml.g5.xlarge",
                        "InitialInstanceCount": REGISTRY[MODEL].min_instances,
                        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
                        "ContainerStartupHealthCheckTimeoutInSeconds": 600,
                        "ModelDataDownloadTimeoutInSeconds": 600,
                        # Driver 550: runs the image's CUDA 12.6 torch (speech_infra.ami).
                        "InferenceAmiVersion": "al2-ami-sagemaker-inference-gpu-3-1",
                    }
                )
            ]
        },
    )


def test_endpoint_is_named_after_the_model(no_plan: Synth) -> None:
    endpoint = only(resources(no_plan.endpoint, "AWS::SageMaker::Endpoint"))
    assert endpoint["Properties"]["EndpointName"] == f"speech-{MODEL}"
    assert "RetainAllVariantProperties" not in endpoint["Properties"]


def test_execution_role_may_pull_only_the_image_repository(no_plan: Synth) -> None:
    pull = statements(no_plan.endpoint)
    by_action = {action: flatten(s["Resource"]) for s in pull for action in actions_of(s)}
    assert by_action["ecr:BatchGetImage"].endswith(
        ":ecr:us-east-1:123456789012:repository/speech-tts"
    )
    assert by_action["ecr:GetAuthorizationToken"] == "*"
    policy = only(resources(no_plan.endpoint, "AWS::IAM::Policy"))
    assert "SpeechFoundationStack" in flatten(policy["Properties"]["Roles"])


@pytest.mark.parametrize("kind", SCALING_KINDS)
def test_without_a_plan_nothing_scales(no_plan: Synth, kind: str) -> None:
    no_plan.endpoint.resource_count_is(kind, 0)


def test_without_a_plan_synthesis_says_why(no_plan: Synth) -> None:
    plan_path = no_plan.stacks.endpoints[MODEL].scaling.plan_path
    expected = f"kokoro-82m: autoscaling left out: no plan at {plan_path} (run tts-bench plan)"
    assert expected in no_plan.printed.splitlines()
    annotation = expected + " [ack: speech-infra:autoscaling-left-out]"
    assert (f"/SpeechEndpointStack-{MODEL}", annotation) in no_plan.messages("warning")


# --- endpoint with a plan -------------------------------------------------------------------


def test_plan_sets_the_scalable_target(with_plan: Synth) -> None:
    with_plan.endpoint.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {
            "ServiceNamespace": "sagemaker",
            "ResourceId": f"endpoint/speech-{MODEL}/variant/AllTraffic",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "MinCapacity": 1,
            "MaxCapacity": 29,
        },
    )
    target = only(resources(with_plan.endpoint, "AWS::ApplicationAutoScaling::ScalableTarget"))
    assert "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint" in flatten(
        target["Properties"]["RoleARN"]
    )
    assert target["DependsOn"] == [
        next(iter(resources(with_plan.endpoint, "AWS::SageMaker::Endpoint")))
    ]


def test_target_tracking_scales_out_only(with_plan: Synth) -> None:
    with_plan.endpoint.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 37.5,
                "PredefinedMetricSpecification": {"PredefinedMetricType": HIGH_RES_CONCURRENCY},
                "ScaleOutCooldown": 30,
                "DisableScaleIn": True,
            },
        },
    )


def test_step_policy_owns_scale_in(with_plan: Synth) -> None:
    template = with_plan.endpoint
    step = {
        logical_id: policy
        for logical_id, policy in resources(
            template, "AWS::ApplicationAutoScaling::ScalingPolicy"
        ).items()
        if policy["Properties"]["PolicyType"] == "StepScaling"
    }
    assert len(step) == 1
    ((step_id, policy),) = step.items()
    assert policy["Properties"]["StepScalingPolicyConfiguration"] == {
        "AdjustmentType": "ChangeInCapacity",
        "Cooldown": 960,
        "MetricAggregationType": "Maximum",
        "StepAdjustments": [{"MetricIntervalUpperBound": 0, "ScalingAdjustment": -1}],
    }
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": f"speech-{MODEL}-ScaleIn",
            "Namespace": "AWS/SageMaker",
            "MetricName": "ConcurrentRequestsPerModel",
            "Dimensions": Match.array_equals(
                [
                    {"Name": "EndpointName", "Value": f"speech-{MODEL}"},
                    {"Name": "VariantName", "Value": "AllTraffic"},
                ]
            ),
            "Statistic": "Maximum",
            "Period": 10,
            "Threshold": 25,
            "ComparisonOperator": "LessThanOrEqualToThreshold",
            "EvaluationPeriods": 3,
            "DatapointsToAlarm": 3,
            "TreatMissingData": "missing",
            "AlarmActions": [{"Ref": step_id}],
        },
    )


def test_alarms_watch_first_chunk_latency_errors_and_concurrency(with_plan: Synth) -> None:
    template = with_plan.endpoint
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": f"speech-{MODEL}-FirstChunkLatencyP95",
            "Namespace": "TTS/Container",
            "MetricName": "FirstChunkLatency",
            "Dimensions": [{"Name": "Model", "Value": MODEL}],
            "ExtendedStatistic": "p95",
            "Threshold": 65,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": f"speech-{MODEL}-ServerErrors",
            "Namespace": "AWS/SageMaker",
            "MetricName": "Invocation5XXErrors",
            "Statistic": "Sum",
        },
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": f"speech-{MODEL}-ConcurrencyOverTarget",
            "MetricName": "ConcurrentRequestsPerModel",
            # The target is in 10 s Maximum units; an Average would sit below it.
            "Statistic": "Maximum",
            "Period": 10,
            "EvaluationPeriods": 36,
            "DatapointsToAlarm": 36,
            "Threshold": 37.5,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )
    template.resource_count_is("AWS::CloudWatch::Alarm", 4)


def test_dashboard_shows_the_planned_thresholds(with_plan: Synth) -> None:
    dashboard = only(resources(with_plan.endpoint, "AWS::CloudWatch::Dashboard"))
    assert dashboard["Properties"]["DashboardName"] == f"speech-{MODEL}"
    body = flatten(dashboard["Properties"]["DashboardBody"])
    for fragment in ('"value":37.5', '"value":25', '"value":65', "FirstChunkLatency"):
        assert fragment in body


def test_with_a_plan_the_container_gets_its_queue_depth(with_plan: Synth) -> None:
    assert model_env(with_plan)["QUEUE_MAX_DEPTH"] == "48"


def test_with_autoscaling_a_redeploy_keeps_the_instance_count(with_plan: Synth) -> None:
    endpoint = only(resources(with_plan.endpoint, "AWS::SageMaker::Endpoint"))
    assert endpoint["Properties"]["RetainAllVariantProperties"] is True
    with_plan.endpoint.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {"ProductionVariants": [Match.object_like({"InitialInstanceCount": 1})]},
    )


def test_with_a_plan_synthesis_says_where_scaling_came_from(with_plan: Synth) -> None:
    printed = with_plan.printed.splitlines()
    assert any(
        line.startswith("kokoro-82m: autoscaling from ")
        and line.endswith(
            "(verdict warn): target 37.5, scale-in 25, cooldowns 30/960 s, instances 1..29"
        )
        for line in printed
    )
    warnings = [text for _, text in with_plan.messages("warning")]
    assert not any("autoscaling left out" in text for text in warnings)
    assert any("queue_max_depth 50 -> 48" in text for text in warnings)


# --- plans that must not turn scaling on ----------------------------------------------------


@pytest.mark.parametrize("kind", SCALING_KINDS)
def test_verdict_stop_leaves_scaling_out(stop_plan: Synth, kind: str) -> None:
    stop_plan.endpoint.resource_count_is(kind, 0)


def test_verdict_stop_is_reported_and_its_values_are_not_used(stop_plan: Synth) -> None:
    assert any(
        "has verdict stop (invocation_ceiling)" in line for line in stop_plan.printed.splitlines()
    )
    assert any("has verdict stop" in text for _, text in stop_plan.messages("warning"))
    assert model_env(stop_plan)["QUEUE_MAX_DEPTH"] == str(REGISTRY[MODEL].queue_max_depth)


@pytest.mark.parametrize("kind", SCALING_KINDS)
def test_scaling_disabled_in_registry_leaves_scaling_out(
    scaling_disabled: Synth, kind: str
) -> None:
    scaling_disabled.endpoint.resource_count_is(kind, 0)


def test_scaling_disabled_still_uses_the_measured_queue_depth(scaling_disabled: Synth) -> None:
    assert model_env(scaling_disabled)["QUEUE_MAX_DEPTH"] == "48"
    assert any(
        "autoscaling left out: scaling disabled in the registry" in line
        for line in scaling_disabled.printed.splitlines()
    )


def test_a_malformed_plan_fails_synthesis(synth_app: SynthFactory, tmp_path: Path) -> None:
    (tmp_path / f"plan-{MODEL}.json").write_text('{"schema": "tts-scaling/plan/1", "model": 3}')
    with pytest.raises(ArtifactError, match=r"plan-kokoro-82m\.json: field '\w+'"):
        synth_app("malformed", artifacts_dir=tmp_path)


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, "ROOT/reports"), ("my-reports", "ROOT/my-reports"), ("/abs/reports", "/abs/reports")],
)
def test_artifacts_dir_relative_to_the_repository_root(given: str | None, expected: str) -> None:
    root = Path("/checkout")
    app = cdk.App(context={"artifacts_dir": given} if given else {})
    settings = AppSettings.from_context(app.node, project_root=root)
    assert settings.artifacts_dir == Path(expected.replace("ROOT", str(root)))


# --- the image ------------------------------------------------------------------------------


def test_without_an_image_override_container_is_built_as_an_asset(
    synth_app: SynthFactory, tmp_path: Path
) -> None:
    root = tmp_path / "checkout"
    (root / "container").mkdir(parents=True)
    (root / "container" / "Dockerfile").write_text("FROM scratch\nARG CUDA_VERSION=12.6\n")
    synth = synth_app(
        "asset", artifacts_dir=root / "reports", project_root=root, context={"image_uri": None}
    )
    assets = json.loads((synth.outdir / f"SpeechEndpointStack-{MODEL}.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    assert image["source"]["platform"] == "linux/amd64"
    model = only(resources(synth.endpoint, "AWS::SageMaker::Model"))
    assert "container-assets" in flatten(model["Properties"]["PrimaryContainer"]["Image"])


def test_without_an_override_or_a_dockerfile_synthesis_says_what_to_do(
    synth_app: SynthFactory, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError, match="-c image_uri="):
        synth_app(
            "no-image", artifacts_dir=tmp_path, project_root=tmp_path, context={"image_uri": None}
        )


def test_an_image_override_must_be_an_ecr_uri(synth_app: SynthFactory, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="context 'image_uri': expected an ECR image URI"):
        synth_app("bad-image", artifacts_dir=tmp_path, context={"image_uri": "docker.io/x:1"})
