"""The CloudWatch join after a ladder: the server's view of each rung's in-flight count
(docs/method.md).

`AWS/SageMaker ConcurrentRequestsPerModel` (EndpointName, VariantName; 10 s, Maximum) arrives
about two minutes late, so the join waits, bounded, until the metric covers the last window.
Its units differ from the client's time-weighted mean; the ratio per rung is what plan converts
thresholds with. CloudWatch keeps 10 s datapoints for 3 hours, 60 s ones for 15 days and 300 s
ones for 63 days, so a window is read at the finest period its age still has (hourly beyond),
and each rung records it as `cw_period_s`. With an inference component the metric is
`ConcurrentRequestsPerCopy` (dimension InferenceComponentName), the same per-copy view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pytest_tts_scaling.aws.clients import Clock, aws_errors
from pytest_tts_scaling.aws.scaling import ScalingScope
from pytest_tts_scaling.core.schema import Rung
from pytest_tts_scaling.core.timeline import parse_iso

NAMESPACE = "AWS/SageMaker"
PERIOD_S = 10
# (age limit in seconds, finest period CloudWatch still holds for data that old).
RETENTION = ((3 * 3600.0, 10), (15 * 86400.0, 60), (63 * 86400.0, 300))
OLDEST_PERIOD_S = 3600
# The metric lags about 2 minutes; past this after the last window the join takes what it has.
MAX_LAG_S = 6 * 60.0
POLL_S = 20.0

T = TypeVar("T")


def period_for(start: datetime, now: datetime) -> int:
    """The finest period CloudWatch still holds for data from `start`, seen at `now`."""
    age = (now - start).total_seconds()
    return next((period for limit, period in RETENTION if age < limit), OLDEST_PERIOD_S)


@dataclass
class _Window:
    index: int
    start: datetime
    end: datetime
    period: int = PERIOD_S
    maximum: float | None = None
    complete: bool = False


def wait_for_metric(
    query: Callable[[], T],
    done: Callable[[T], bool],
    awaited: Callable[[T], str],
    *,
    deadline: datetime,
    clock: Clock,
    poll_s: float,
    log: Callable[[str], None],
) -> T:
    """Query until `done` or `deadline`: CloudWatch publishes minutes late. The wait is said
    once, naming what is `awaited`; the last answer is returned either way."""
    announced = False
    while True:
        answer = query()
        now = clock.now()
        if done(answer) or now >= deadline:
            return answer
        if not announced:
            left = (deadline - now).total_seconds()
            log(f"waiting up to {left:.0f} s for CloudWatch {awaited(answer)}")
            announced = True
        clock.sleep(min(poll_s, max(1.0, (deadline - now).total_seconds())))


def annotate_rungs(
    cloudwatch: Any,
    rungs: list[Rung],
    *,
    endpoint: str,
    variant: str,
    clock: Clock,
    component: str | None = None,
    log: Callable[[str], None] = lambda line: None,
    max_lag_s: float = MAX_LAG_S,
    poll_s: float = POLL_S,
) -> list[Rung]:
    """Rungs with `cw_max` (highest Maximum in the window), `cw_ratio` = cw_max / mean and
    `cw_period_s`, the period it was read at (10 s while CloudWatch still holds it).

    The metric is the variant's ConcurrentRequestsPerModel, or `component`'s
    ConcurrentRequestsPerCopy when a component is measured.
    """
    now = clock.now()
    windows = [
        _Window(i, start, parse_iso(r.window_end), period_for(start, now))
        for i, r in enumerate(rungs)
        if r.window_start and r.window_end
        for start in (parse_iso(r.window_start),)
    ]
    if not windows:
        return list(rungs)
    coarse = sorted({w.period for w in windows if w.period != PERIOD_S})
    if coarse:
        log(
            f"CloudWatch keeps 10 s datapoints for 3 h only: older rung windows are read at "
            f"{', '.join(f'{p} s' for p in coarse)}"
        )
    deadline = max(w.end for w in windows) + timedelta(seconds=max_lag_s)
    scope = ScalingScope(endpoint, variant, component)
    metric, dimensions = scope.metric, scope.metric_dimensions

    def query() -> list[_Window]:
        for window in windows:
            if not window.complete:
                _query(cloudwatch, window, metric, dimensions)
        return [w for w in windows if not w.complete]

    with aws_errors():
        wait_for_metric(
            query,
            lambda pending: not pending,
            lambda pending: f"{metric} to cover {len(pending)} rung window(s)",
            deadline=deadline,
            clock=clock,
            poll_s=poll_s,
            log=log,
        )
    missing = [rungs[w.index].concurrency for w in windows if w.maximum is None]
    if missing:
        log(f"CloudWatch {metric}: no datapoints for rung(s) {missing}; cw_ratio left empty")
    out = list(rungs)
    for window in windows:
        rung = rungs[window.index]
        ratio = None
        if window.maximum is not None and rung.concurrency_mean > 0:
            ratio = window.maximum / rung.concurrency_mean
        out[window.index] = rung.model_copy(
            update={"cw_max": window.maximum, "cw_ratio": ratio, "cw_period_s": window.period}
        )
    return out


def _query(cloudwatch: Any, window: _Window, metric: str, dimensions: list[dict[str, str]]) -> None:
    points = cloudwatch.get_metric_statistics(
        Namespace=NAMESPACE,
        MetricName=metric,
        Dimensions=dimensions,
        StartTime=window.start,
        EndTime=window.end,
        Period=window.period,
        Statistics=["Maximum"],
    ).get("Datapoints", [])
    if not points:
        return
    window.maximum = max(float(p["Maximum"]) for p in points)
    latest = max(p["Timestamp"] for p in points)
    # Complete once a datapoint reaches the window's last two periods.
    window.complete = latest >= window.end - timedelta(seconds=2 * window.period)
