"""The deployed policy's detection lag, which a forced scale-out bypasses and ttotal adds back.

Bounded from what is deployed: the alarm's period × evaluation periods + the scale-out
cooldown; with several scale-out policies the quickest one decides.
"""

from __future__ import annotations

from typing import Any

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import aws_errors
from pytest_tts_scaling.core.timeline import DEFAULT_POLICY_LAG_S

# Application Auto Scaling's cooldown for SageMaker when a policy sets none.
DEFAULT_COOLDOWN_S = 300
# Target tracking decides on 3 evaluation periods of its metric: 10 s high resolution, else 60 s.
TRACKING_EVALUATION_PERIODS = 3


def _cooldown(value: Any) -> tuple[float, str]:
    if value is None:
        return float(DEFAULT_COOLDOWN_S), f"{DEFAULT_COOLDOWN_S} s scale-out cooldown (the default)"
    return float(value), f"{float(value):g} s scale-out cooldown"


def _scale_out_alarms(policy: dict[str, Any], alarms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        a
        for a in scaling.alarms_for_policy(policy, alarms)
        if str(a.get("ComparisonOperator", "")).startswith("Greater")
        and a.get("Period")
        and a.get("EvaluationPeriods")
    ]


def policy_lag_bound(
    policies: list[dict[str, Any]], alarms: list[dict[str, Any]], resource: str
) -> tuple[float, str]:
    """(seconds, source) the deployed policy takes to ask for capacity: alarm period × evaluation
    periods + scale-out cooldown. With several scale-out policies the quickest one decides."""
    candidates: list[tuple[float, str]] = []
    for policy in policies:
        name = policy["PolicyName"]
        kind = policy.get("PolicyType")
        if kind == "TargetTrackingScaling":
            config = policy.get("TargetTrackingScalingPolicyConfiguration") or {}
            cooldown, cooldown_text = _cooldown(config.get("ScaleOutCooldown"))
            high = _scale_out_alarms(policy, alarms)
            if high:
                alarm = min(high, key=lambda a: a["Period"] * a["EvaluationPeriods"])
                period, periods = float(alarm["Period"]), int(alarm["EvaluationPeriods"])
                how = f"its alarm {alarm['AlarmName']}"
            else:
                metric = (config.get("PredefinedMetricSpecification") or {}).get(
                    "PredefinedMetricType"
                ) or "a customized metric"
                period = 10.0 if metric in scaling.HIGH_RESOLUTION_METRICS else 60.0
                periods = TRACKING_EVALUATION_PERIODS
                how = f"target tracking on {metric}"
        elif kind == "StepScaling":
            config = policy.get("StepScalingPolicyConfiguration") or {}
            steps = config.get("StepAdjustments") or []
            if not any(step.get("ScalingAdjustment", 0) > 0 for step in steps):
                continue  # a scale-in policy
            triggers = _scale_out_alarms(policy, alarms) or [
                a
                for a in scaling.alarms_for_policy(policy, alarms)
                if a.get("Period") and a.get("EvaluationPeriods")
            ]
            if not triggers:
                continue  # no alarm invokes it: it never scales out
            alarm = min(triggers, key=lambda a: a["Period"] * a["EvaluationPeriods"])
            cooldown, cooldown_text = _cooldown(config.get("Cooldown"))
            period, periods = float(alarm["Period"]), int(alarm["EvaluationPeriods"])
            how = f"step scaling on alarm {alarm['AlarmName']}"
        else:
            continue
        lag = period * periods + cooldown
        candidates.append(
            (
                lag,
                f"policy {name} ({how}): {period:g} s period x {periods} evaluation periods + "
                f"{cooldown_text}",
            )
        )
    if not candidates:
        return float(DEFAULT_POLICY_LAG_S), (
            f"assumed, no scale-out policy deployed on {resource}: 10 s period x 3 evaluation "
            "periods + 30 s scale-out cooldown"
        )
    return min(candidates)


def read_policy_lag(clients: Any, scope: scaling.ScalingScope) -> tuple[float, str]:
    with aws_errors():
        policies = scaling.policies_for_resource(clients.autoscaling, scope.resource_id)
        alarms = scaling.all_alarms(clients.cloudwatch)
    return policy_lag_bound(policies, alarms, scope.resource_id)
