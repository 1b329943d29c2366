"""The autoscaling policy the infra deploys, and its decisions one alarm period at a time.

Target tracking on per-instance concurrency (the CloudWatch Maximum per period) against
``target_concurrency``, firing after ``scale_out_periods`` periods above it, sized
``ceil(n * metric / target)``, with a cooldown; new instances serve ``provision_s`` after the
decision. Scale-in is a step policy: ``scale_in_periods`` periods at or below
``scale_in_concurrency`` remove one instance, then a cooldown. One definition for the fleet
simulation (:mod:`pytest_tts_scaling.core.simulate`) and the local fleet's emulation of the
platform (:mod:`pytest_tts_scaling.fleet.localfleet`). Pure: no clock, the caller gives the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Policy:
    """The scaling policy and admission bound, in client concurrency units
    (docs/production.md#deploying)."""

    target_concurrency: float
    scale_in_concurrency: float
    min_instances: int = 1
    max_instances: int = 1
    scale_out_cooldown_s: float = 30.0
    scale_in_cooldown_s: float = 300.0
    provision_s: float = 0.0
    queue_max_depth: int | None = None
    period_s: float = 10.0
    scale_out_periods: int = 3
    scale_in_periods: int = 3

    def __post_init__(self) -> None:
        if self.target_concurrency <= 0:
            raise ValueError(f"target_concurrency must be > 0, got {self.target_concurrency}")
        if not 0 <= self.scale_in_concurrency <= self.target_concurrency:
            raise ValueError("scale_in_concurrency must be within [0, target_concurrency]")
        if not 1 <= self.min_instances <= self.max_instances:
            raise ValueError(
                f"expected 1 <= min_instances <= max_instances, got "
                f"{self.min_instances}..{self.max_instances}"
            )
        if self.queue_max_depth is not None and self.queue_max_depth < 1:
            raise ValueError(f"queue_max_depth must be >= 1 or None, got {self.queue_max_depth}")
        if self.period_s <= 0 or self.scale_out_periods < 1 or self.scale_in_periods < 1:
            raise ValueError("period_s must be > 0 and the period counts >= 1")
        if min(self.provision_s, self.scale_out_cooldown_s, self.scale_in_cooldown_s) < 0:
            raise ValueError("provision_s and the cooldowns must be >= 0")


@dataclass(frozen=True)
class ScaleEvent:
    at_s: float
    direction: Literal["out", "in"]
    instances: int
    ready_at_s: float
    metric: float


class Autoscaler:
    """The policy's decisions, one alarm period at a time, in seconds of any clock.

    One definition for the simulation and for the local fleet's emulation of the platform:
    target tracking fires after ``scale_out_periods`` periods whose Maximum is above the target,
    sized ``ceil(n * metric / target)`` less what is already provisioning, then waits out its
    cooldown; the step policy removes one instance after ``scale_in_periods`` periods at or below
    the scale-in threshold, never while instances provision or within either cooldown.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.above = 0
        self.below = 0
        self.out_cooldown_until = -math.inf
        self.in_cooldown_until = -math.inf

    def decide(self, end_s: float, metric: float, serving: int, pending: int) -> ScaleEvent | None:
        """The scaling event at the end of one period whose Maximum was ``metric``, or None."""
        p = self.policy
        self.above = self.above + 1 if metric > p.target_concurrency else 0
        self.below = self.below + 1 if metric <= p.scale_in_concurrency else 0
        if self.above >= p.scale_out_periods and end_s >= self.out_cooldown_until - 1e-9:
            wanted = min(p.max_instances, math.ceil(serving * metric / p.target_concurrency - 1e-9))
            extra = wanted - serving - pending
            if extra <= 0:
                return None
            self.out_cooldown_until = end_s + p.scale_out_cooldown_s
            return ScaleEvent(end_s, "out", extra, end_s + p.provision_s, metric)
        if (
            self.below >= p.scale_in_periods
            and not pending
            and serving > p.min_instances
            and end_s >= self.in_cooldown_until - 1e-9
            and end_s >= self.out_cooldown_until - 1e-9
        ):
            self.in_cooldown_until = end_s + p.scale_in_cooldown_s
            return ScaleEvent(end_s, "in", 1, end_s, metric)
        return None
