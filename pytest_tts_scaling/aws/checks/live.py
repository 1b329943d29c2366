"""validate_live against a deployed endpoint: what the fleet did, read back from AWS.

The local rehearsal logs its own decisions; a deployed fleet's are read, and mapped into the
same :class:`FleetEvent` and :class:`Dispatch` records, so each check of `fleet/live.py` is one
code path for both:

- scale-out and scale-in: Application Auto Scaling's scaling activities on the variant's
  scalable target that started within the run (each sets a new desired count; `out` or `in`
  against the count before it), at their start, when the policy decided. Every page is read
  and filtered by StartTime, since the API documents no order; the count an activity set has
  no field of its own, so it is read from the Description ("Setting desired instance count to
  N.") and, where that text says otherwise, from the first DescribeEndpoint poll after the
  activity began;
- when the first new instance of a scale-out served: the first DescribeEndpoint poll taken
  during the run whose CurrentInstanceCount holds it (the variant then routes to it), else the
  activity's end;
- the in-flight count before each request: the metric the deployed policy tracks
  (ConcurrentRequestsPerModel, Maximum, 10 s, the finest SageMaker publishes, or the finest
  period CloudWatch still holds for a run read more than 3 hours later) over the instance
  count polled at that time, as the local fleet's emulation takes the variant's in-flight over
  its serving instances; NaN where CloudWatch has no datapoint, which the rejection check fails
  on.

Every call goes through an injected client and :class:`Clock`, so tests drive it on moto and a
botocore Stubber without sleeping.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pytest_tts_scaling.aws.clients import AwsCallError, AwsClients, Clock, aws_errors
from pytest_tts_scaling.aws.cloudwatch import (
    MAX_LAG_S,
    NAMESPACE,
    PERIOD_S,
    POLL_S,
    period_for,
    wait_for_metric,
)
from pytest_tts_scaling.aws.fingerprint import describe_endpoint
from pytest_tts_scaling.aws.scaling import ScalingScope
from pytest_tts_scaling.core.live import Dispatch, FleetEvent, FleetLog

# DescribeEndpoint every this many seconds while the load runs.
COUNT_POLL_S = 5.0
# GetMetricStatistics returns at most 1440 datapoints a call.
MAX_DATAPOINTS = 1440
# An activity that did not change capacity (refused, or not done) is no scaling event.
CHANGED = frozenset({"Successful", "InProgress", "Pending"})
# The count an activity set, in its Description ("Setting desired instance count to 3."): the
# API has no field for it, and the wording is an example in the documentation, not a contract.
_COUNT = re.compile(r"count to (\d+)")


def _ns(at: datetime) -> int:
    return round(at.timestamp() * 1e9)


@dataclass(frozen=True)
class CountSample:
    """One DescribeEndpoint of the variant: instances serving and wanted, at `at_ns`."""

    at_ns: int
    current: int | None
    desired: int | None


@dataclass
class DeployedFleet:
    """One deployed variant, watched around a load (`with` it): its instance counts polled on
    a thread; afterwards :meth:`log` reads what its scaling did."""

    clients: AwsClients
    endpoint: str
    variant: str
    poll_s: float = COUNT_POLL_S
    samples: list[CountSample] = field(default_factory=list)
    started: datetime | None = None
    ended: datetime | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def scope(self) -> ScalingScope:
        return ScalingScope(self.endpoint, self.variant)

    def sample(self) -> CountSample:
        with aws_errors():
            description = describe_endpoint(self.clients.sagemaker, self.endpoint) or {}
        variants = description.get("ProductionVariants", [])
        variant: dict[str, Any] = next(
            (v for v in variants if v.get("VariantName") == self.variant), {}
        )
        taken = CountSample(
            _ns(self.clients.clock.now()),
            variant.get("CurrentInstanceCount"),
            variant.get("DesiredInstanceCount"),
        )
        self.samples.append(taken)
        return taken

    def __enter__(self) -> DeployedFleet:
        self.started = self.clients.clock.now()
        self.sample()  # the count the run starts from, before any load
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.sample()
        self.ended = self.clients.clock.now()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            with contextlib.suppress(AwsCallError):  # a gap in the counts; the next poll fills it
                self.sample()

    def log(self, rows: Sequence[dict[str, Any]], progress: Callable[[str], None]) -> FleetLog:
        """The fleet's events and the load's dispatches, as the local fleet logs them."""
        if self.started is None or self.ended is None:
            raise RuntimeError("DeployedFleet.log: the fleet was not watched around a load")
        clock, scope = self.clients.clock, self.scope
        activities = scaling_activities(
            self.clients.autoscaling, scope, self.started, self.ended, log=progress
        )
        points = concurrency_maxima(
            self.clients.cloudwatch, scope, self.started, self.ended, clock=clock, log=progress
        )
        first = self.samples[0].current if self.samples else None
        return FleetLog(
            initial=[f"{scope.describe()}#{i}" for i in range(first or 0)],
            events=fleet_events(activities, self.samples),
            dispatches=dispatches(rows, points, scope.describe()),
        )


@dataclass(frozen=True)
class Activity:
    """One scaling activity: when it started and ended, and the desired count it set (None
    where its Description does not say; the polls then tell)."""

    start_ns: int
    end_ns: int | None
    desired: int | None
    status: str


def scaling_activities(
    autoscaling: Any,
    scope: ScalingScope,
    start: datetime,
    end: datetime,
    *,
    log: Callable[[str], None] = lambda line: None,
) -> list[Activity]:
    """The activities on the scope's scalable target that started in [start, end], oldest
    first. Every page is read: the service documents no order for them."""
    found: list[Activity] = []
    unread: list[str] = []
    pages = autoscaling.get_paginator("describe_scaling_activities").paginate(
        ServiceNamespace="sagemaker",
        ResourceId=scope.resource_id,
        ScalableDimension=scope.dimension,
    )
    with aws_errors():
        for page in pages:
            for item in page.get("ScalingActivities", []):
                began = item["StartTime"]
                if not start <= began <= end or item.get("StatusCode") not in CHANGED:
                    continue
                description = str(item.get("Description", ""))
                count = _COUNT.search(description)
                if count is None:
                    unread.append(description)
                ended = item.get("EndTime")
                found.append(
                    Activity(
                        _ns(began),
                        None if ended is None else _ns(ended),
                        None if count is None else int(count.group(1)),
                        str(item["StatusCode"]),
                    )
                )
    if unread:
        log(
            f"{len(unread)} scaling activit{'y' if len(unread) == 1 else 'ies'} name no count "
            f"('{unread[0]}'): the count is read from DescribeEndpoint's DesiredInstanceCount "
            "polled after it began"
        )
    return sorted(found, key=lambda a: a.start_ns)


def fleet_events(
    activities: Sequence[Activity], samples: Sequence[CountSample]
) -> list[FleetEvent]:
    """`out`/`in` at each activity's start (against the desired count before it) and, for a
    scale-out, `first_served` when a poll first held one instance more (else its end). An
    activity whose count is unknown takes the first polled desired count after it began that
    differs from the one before."""
    polled = sorted(samples, key=lambda s: s.at_ns)
    first = polled[0] if polled else None
    desired = (first.desired or first.current or 0) if first is not None else 0
    events: list[FleetEvent] = []
    for activity in sorted(activities, key=lambda a: a.start_ns):
        target = activity.desired
        if target is None:
            target = next(
                (
                    s.desired
                    for s in polled
                    if s.at_ns >= activity.start_ns
                    and s.desired is not None
                    and s.desired != desired
                ),
                None,
            )
        if target is None or target == desired:
            continue
        if target < desired:
            events.append(FleetEvent(activity.start_ns, "in", None, target))
            desired = target
            continue
        events.append(FleetEvent(activity.start_ns, "out", None, desired))
        wanted = desired + 1
        served = next(
            (
                s.at_ns
                for s in polled
                if s.at_ns >= activity.start_ns and (s.current or 0) >= wanted
            ),
            activity.end_ns if activity.status == "Successful" else None,
        )
        if served is not None:
            events.append(FleetEvent(served, "first_served", None, wanted))
        desired = target
    return sorted(events, key=lambda e: e.at_ns)


@dataclass(frozen=True)
class Datapoint:
    """The metric's Maximum over the `period_s` that starts at `start_ns`."""

    start_ns: int
    maximum: float
    period_s: int = PERIOD_S


def concurrency_maxima(
    cloudwatch: Any,
    scope: ScalingScope,
    start: datetime,
    end: datetime,
    *,
    clock: Clock,
    max_lag_s: float = MAX_LAG_S,
    poll_s: float = POLL_S,
    log: Callable[[str], None] = lambda line: None,
) -> list[Datapoint]:
    """The tracked metric's Maxima over [start, end] at the finest period CloudWatch still
    holds for `start` (10 s for 3 hours, as the rungs' join reads them); it arrives minutes
    late, so this waits (bounded by `max_lag_s` after `end`) until a datapoint reaches the last
    periods.

    The query covers whole periods (CloudWatch's periods sit on the clock's multiples of the
    period): from the one that holds `start` to the end of the one that holds `end`. From
    `start` itself the period it falls in would be left out, and to `end` itself (an exclusive
    bound, cut to the second) the period it falls in would be, whenever the run ends within a
    second of that period's start: its first or last requests would have no reading.
    """
    period = period_for(start, clock.now())
    if period != PERIOD_S:
        log(f"CloudWatch keeps 10 s datapoints for 3 h only: {scope.metric} is read at {period} s")
    start = datetime.fromtimestamp(math.floor(start.timestamp() / period) * period, start.tzinfo)
    last = _ns(end) - 2 * period * 10**9
    after = (math.floor(end.timestamp() / period) + 1) * period
    through = datetime.fromtimestamp(after, end.tzinfo)
    return wait_for_metric(
        lambda: _maxima(cloudwatch, scope, start, through, period),
        lambda points: bool(points) and points[-1].start_ns >= last,
        lambda points: f"{scope.metric} to cover the run",
        deadline=end + timedelta(seconds=max_lag_s),
        clock=clock,
        poll_s=poll_s,
        log=log,
    )


def _maxima(
    cloudwatch: Any, scope: ScalingScope, start: datetime, end: datetime, period: int
) -> list[Datapoint]:
    span = timedelta(seconds=period * MAX_DATAPOINTS)
    points: list[Datapoint] = []
    with aws_errors():
        lo = start
        while lo < end:
            hi = min(lo + span, end)
            answer = cloudwatch.get_metric_statistics(
                Namespace=NAMESPACE,
                MetricName=scope.metric,
                Dimensions=scope.metric_dimensions,
                StartTime=lo,
                EndTime=hi,
                Period=period,
                Statistics=["Maximum"],
            )
            points += [
                Datapoint(_ns(p["Timestamp"]), float(p["Maximum"]), period)
                for p in answer.get("Datapoints", [])
            ]
            lo = hi
    return sorted(points, key=lambda p: p.start_ns)


def dispatches(
    rows: Sequence[dict[str, Any]], points: Sequence[Datapoint], target: str
) -> list[Dispatch]:
    """Each request of the load with the in-flight per instance when it was sent: the period's
    Maximum of ConcurrentRequestsPerModel, a count per model container (the unit the deployed
    target tracks and qmax measured at one instance), so not divided by the instance count;
    NaN without a datapoint."""
    starts = [p.start_ns for p in points]
    out: list[Dispatch] = []
    for row in rows:
        at = int(row["epoch_start_ns"])
        i = bisect_right(starts, at) - 1
        point = points[i] if i >= 0 and at < starts[i] + points[i].period_s * 10**9 else None
        in_flight = point.maximum if point is not None else math.nan
        out.append(Dispatch(at, target, in_flight, str(row["status"])))
    return out


def fleet_json(fleet: DeployedFleet, log: FleetLog) -> str:
    """What was read, beside the records, so a failed check can be traced to its readings."""
    body = {
        "endpoint": fleet.endpoint,
        "variant": fleet.variant,
        "counts": [asdict(s) for s in fleet.samples],
        "events": [asdict(e) for e in log.events],
    }
    return json.dumps(body, indent=2) + "\n"
