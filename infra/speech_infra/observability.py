"""EndpointObservability: a dashboard and the alarms that watch the measured policy
(docs/production.md#deploying).

- ``FirstChunkLatencyP95``: the container's own EMF metric (namespace ``TTS/Container``, metric
  ``FirstChunkLatency``, dimension ``Model``), p95 above the plan's ``first_chunk_alarm_ms`` (p95
  TTFAB at concurrency 1): instances are slower than when measured, whatever the queue does.
- ``ServerErrors``: ``Invocation5XXErrors`` from SageMaker.
- ``ConcurrencyOverTarget``: per-instance concurrency held above the scaling target for longer
  than a scale-out takes, so the policy is not keeping up. The target is in the units of the 10 s
  ``Maximum`` (the plan converts it with the ratio measured on that statistic), so the alarm
  reads the 10 s Maximum too: an Average over a minute sits below it and fires late or never.

Alarm names are ``speech-{model}-{what}``: ``tts-bench drift`` and ``validate`` look them up.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from pytest_tts_scaling.core.schema import PlanArtifact
from speech_infra.autoscaling import concurrency_metric
from speech_infra.naming import alarm_name, endpoint_name

ONE_MINUTE = cdk.Duration.minutes(1)
TEN_SECONDS = cdk.Duration.seconds(10)
# A scale-out took 320 s in the published method's measurement (the blog post docs/method.md
# names): being over target for 6 minutes is not a transient the policy is still reacting to.
OVER_TARGET_MINUTES = 6
OVER_TARGET_PERIODS = OVER_TARGET_MINUTES * 6  # of 10 s


@dataclass(frozen=True)
class _Metrics:
    """What the alarms and the dashboard read, per endpoint variant."""

    first_chunk: cloudwatch.Metric
    server_errors: cloudwatch.Metric
    client_errors: cloudwatch.Metric
    invocations: cloudwatch.Metric
    model_latency: cloudwatch.Metric
    concurrency_max: cloudwatch.Metric


def _metrics(model_name: str, variant_name: str) -> _Metrics:
    variant_dims = {"EndpointName": endpoint_name(model_name), "VariantName": variant_name}

    def variant_metric(metric_name: str, statistic: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace="AWS/SageMaker",
            metric_name=metric_name,
            dimensions_map=variant_dims,
            statistic=statistic,
            period=ONE_MINUTE,
        )

    return _Metrics(
        first_chunk=cloudwatch.Metric(
            namespace="TTS/Container",
            metric_name="FirstChunkLatency",
            dimensions_map={"Model": model_name},
            statistic="p95",
            period=ONE_MINUTE,
            unit=cloudwatch.Unit.MILLISECONDS,
        ),
        server_errors=variant_metric("Invocation5XXErrors", "Sum"),
        client_errors=variant_metric("Invocation4XXErrors", "Sum"),
        invocations=variant_metric("Invocations", "Sum"),
        model_latency=variant_metric("ModelLatency", "p95"),
        concurrency_max=concurrency_metric(model_name, variant_name, period=TEN_SECONDS),
    )


class EndpointObservability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_name: str,
        variant_name: str,
        plan: PlanArtifact,
    ) -> None:
        super().__init__(scope, construct_id)
        metrics = _metrics(model_name, variant_name)
        self.first_chunk_alarm, self.server_errors_alarm, self.concurrency_alarm = self._alarms(
            model_name, plan, metrics
        )
        self.dashboard = self._dashboard(endpoint_name(model_name), plan, metrics)

    def _alarms(
        self, model_name: str, plan: PlanArtifact, metrics: _Metrics
    ) -> tuple[cloudwatch.Alarm, cloudwatch.Alarm, cloudwatch.Alarm]:
        """The three alarms, named for `tts-bench drift` and `validate` to find."""
        first_chunk = cloudwatch.Alarm(
            self,
            "FirstChunkLatencyP95",
            alarm_name=alarm_name(model_name, "FirstChunkLatencyP95"),
            alarm_description=(
                f"p95 time to first audio chunk above {plan.first_chunk_alarm_ms:g} ms (the plan's "
                "p95 at concurrency 1): the service time itself has regressed."
            ),
            metric=metrics.first_chunk,
            threshold=plan.first_chunk_alarm_ms,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=5,
            datapoints_to_alarm=3,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        server_errors = cloudwatch.Alarm(
            self,
            "ServerErrors",
            alarm_name=alarm_name(model_name, "ServerErrors"),
            alarm_description="The endpoint answered with 5XX errors in 2 of the last 3 minutes.",
            metric=metrics.server_errors,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        concurrency = cloudwatch.Alarm(
            self,
            "ConcurrencyOverTarget",
            alarm_name=alarm_name(model_name, "ConcurrencyOverTarget"),
            alarm_description=(
                f"Concurrency per instance (10 s Maximum, the units of the target) above the "
                f"scaling target {plan.scaling_target_value:g} for {OVER_TARGET_MINUTES} minutes: "
                "scale-out is not keeping up (max_instances reached, or capacity is slow to "
                "arrive)."
            ),
            metric=metrics.concurrency_max,
            threshold=plan.scaling_target_value,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=OVER_TARGET_PERIODS,
            datapoints_to_alarm=OVER_TARGET_PERIODS,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        return first_chunk, server_errors, concurrency

    def _dashboard(
        self, endpoint: str, plan: PlanArtifact, metrics: _Metrics
    ) -> cloudwatch.Dashboard:
        """Concurrency against the plan's thresholds, first chunk latency, traffic, alarms."""
        dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=endpoint, default_interval=cdk.Duration.hours(3)
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Concurrent requests per instance (max, 10 s)",
                left=[metrics.concurrency_max],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(
                        value=plan.scaling_target_value, label="scale-out target"
                    ),
                    cloudwatch.HorizontalAnnotation(
                        value=plan.scale_in_threshold, label="scale-in threshold"
                    ),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="First chunk latency p95 (ms)",
                left=[metrics.first_chunk],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=plan.first_chunk_alarm_ms, label="alarm")
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Invocations and errors",
                left=[metrics.invocations],
                right=[metrics.server_errors, metrics.client_errors],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Model latency p95 (microseconds)", left=[metrics.model_latency], width=6
            ),
            cloudwatch.AlarmStatusWidget(
                title="Alarms",
                alarms=[self.first_chunk_alarm, self.server_errors_alarm, self.concurrency_alarm],
                width=6,
            ),
        )
        return dashboard
