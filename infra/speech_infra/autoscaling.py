"""EndpointAutoscaling: the measured policy on one endpoint variant (docs/steps.md#plan,
docs/production.md#deploying).

Scale-out and scale-in are split on purpose. Target tracking on the high-resolution concurrency
metric adds instances quickly (short cooldown) and never removes them (``DisableScaleIn``). A
step policy owns scale-in: one instance at a time, only after the concurrency has stayed at or
below ``scale_in_threshold`` for three 10 s periods, then a long cooldown, because capacity
removed by mistake takes a whole T_total to come back.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from constructs import Construct

from pytest_tts_scaling.core.schema import PlanArtifact
from speech_infra.naming import alarm_name, endpoint_name, scaling_resource_id

SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
SERVICE_LINKED_ROLE = (
    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)
# 10 s is the resolution SageMaker publishes ConcurrentRequestsPerModel at; the drift
# and ttotal steps bound the policy's detection lag as period x periods + cooldown (10 x 3 + 30).
SCALE_IN_PERIOD = cdk.Duration.seconds(10)
SCALE_IN_EVALUATION_PERIODS = 3


def concurrency_metric(
    model_name: str, variant_name: str, *, period: cdk.Duration, statistic: str = "Maximum"
) -> cloudwatch.Metric:
    """AWS/SageMaker ConcurrentRequestsPerModel of one variant: in-flight requests per instance."""
    return cloudwatch.Metric(
        namespace="AWS/SageMaker",
        metric_name="ConcurrentRequestsPerModel",
        dimensions_map={"EndpointName": endpoint_name(model_name), "VariantName": variant_name},
        statistic=statistic,
        period=period,
    )


class EndpointAutoscaling(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_name: str,
        variant_name: str,
        plan: PlanArtifact,
        endpoint: cdk.CfnResource,
    ) -> None:
        super().__init__(scope, construct_id)
        self.target = appscaling.ScalableTarget(
            self,
            "Target",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=scaling_resource_id(model_name, variant_name),
            scalable_dimension=SCALABLE_DIMENSION,
            min_capacity=plan.min_instances,
            max_capacity=plan.max_instances,
            # SageMaker variants scale through Application Auto Scaling's service-linked role;
            # without this the construct would create a service role nobody uses.
            role=iam.Role.from_role_arn(
                self,
                "ServiceLinkedRole",
                cdk.Stack.of(self).format_arn(
                    service="iam",
                    region="",
                    resource="role",
                    resource_name=SERVICE_LINKED_ROLE,
                ),
            ),
        )
        # The resource id is a string, not a reference: order it after the endpoint explicitly.
        self.target.node.add_dependency(endpoint)

        self.scale_out = appscaling.TargetTrackingScalingPolicy(
            self,
            "ScaleOut",
            scaling_target=self.target,
            policy_name=f"{endpoint_name(model_name)}-scale-out",
            predefined_metric=(
                appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION
            ),
            target_value=plan.scaling_target_value,
            scale_out_cooldown=cdk.Duration.seconds(plan.scale_out_cooldown_s),
            disable_scale_in=True,
        )

        self.scale_in = appscaling.StepScalingAction(
            self,
            "ScaleIn",
            scaling_target=self.target,
            policy_name=f"{endpoint_name(model_name)}-scale-in",
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=cdk.Duration.seconds(plan.scale_in_cooldown_s),
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
        )
        # Step bounds are relative to the alarm threshold: at or below it, remove one instance.
        self.scale_in.add_adjustment(adjustment=-1, upper_bound=0)
        self.scale_in_alarm = cloudwatch.Alarm(
            self,
            "ScaleInAlarm",
            alarm_name=alarm_name(model_name, "ScaleIn"),
            alarm_description=(
                f"Concurrency per instance <= {plan.scale_in_threshold:g} (plan's C_scale_min in "
                f"CloudWatch units) for {SCALE_IN_EVALUATION_PERIODS} x 10 s: remove one instance."
            ),
            metric=concurrency_metric(model_name, variant_name, period=SCALE_IN_PERIOD),
            threshold=plan.scale_in_threshold,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=SCALE_IN_EVALUATION_PERIODS,
            datapoints_to_alarm=SCALE_IN_EVALUATION_PERIODS,
            # Missing periods count neither way (CloudWatch's "missing"): the periods that have
            # data are judged as they read, and with no datapoint in the evaluation range the
            # alarm goes to INSUFFICIENT_DATA, which takes no action. So a metric sparse at low
            # load still scales the fleet in on its low readings (notBreaching would count
            # every gap as high and block that), while a metric pipeline that has stopped
            # cannot walk the fleet down to its minimum (breaching would count every gap as
            # low). An idle fleet scales in only if ConcurrentRequestsPerModel publishes its
            # zeros, which target tracking on the same metric relies on as well (Application
            # Auto Scaling cannot scale on INSUFFICIENT_DATA); docs/aws-first-run.md has the
            # command that confirms it on a real endpoint.
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
        )
        self.scale_in_alarm.add_alarm_action(cw_actions.ApplicationScalingAction(self.scale_in))
