"""ttotal on SageMaker: force one more instance under a freeze and time every stage (SPEC §4).

The endpoint is frozen (scaling suspended, one instance), a closed-loop probe runs at a rung the
qmax artifact measured, and after the warm-up UpdateEndpointWeightsAndCapacities asks for one
more instance: the clock starts. Each stage is read from its own source and says whether it is a
point or a bound (the true moment lies at or before it):

- `instance_logging`: firstEventTimestamp of the new instance's log stream `VARIANT/INSTANCE-ID`
  in `/aws/sagemaker/Endpoints/NAME`, the stream that was not there before; a bound on
  provisioning + image pull.
- `container_started` … `ready`: the container's own `TTS_MARKER` lines, read from the head of
  that stream.
- `in_service`: DescribeEndpoint's CurrentInstanceCount reaches the new count; the
  ActivatingTraffic StartTime of VariantStatus when SageMaker shows one, else the poll (a bound).
- `traffic_recovered`: the probe's p95 TTFAB over the window is back within 1.25 × the ladder's
  p95 at the post-scale concurrency.

The policy's detection lag, which a forced scale-out bypasses, is bounded from the deployed
policy and added: T_total = measured span + lag. Whatever happens, the freeze restores the
endpoint, from N+1 instances straight back to the N it had.

Two clocks, kept apart: every wait on AWS (scale-out, log delivery) polls with
the injected :class:`~pytest_tts_scaling.aws.clients.Clock`, so tests drive minutes of
provisioning without sleeping; the probe's warm-up and recovery window are load held for real
time, as every rung of the ladder is. The probe runs on its own event loop in a thread, so the
control plane stays in the main thread, where Ctrl-C and SIGTERM arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pytest_tts_scaling.aws import scaling
from pytest_tts_scaling.aws.clients import Clock, WaitTimeout, aws_errors, error_code
from pytest_tts_scaling.aws.fingerprint import TERMINAL_STATUSES, describe_endpoint
from pytest_tts_scaling.aws.freeze import Capacity
from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact
from pytest_tts_scaling.core.timeline import (
    CONTAINER_MARKERS,
    DEFAULT_POLICY_LAG_S,
    Event,
    assemble,
    probe_rung,
    recovered_at_ns,
    recovery_threshold_ms,
)
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.load.engine import DRAIN_S, ClosedLoop, MakeRequest

if TYPE_CHECKING:
    from pytest_tts_scaling.endpoints.base import Endpoint
    from pytest_tts_scaling.endpoints.sagemaker import SageMakerEndpoint
    from pytest_tts_scaling.load.transports import Transport
    from pytest_tts_scaling.load.workload import Workload
    from pytest_tts_scaling.options import ResolvedOptions

Log = Callable[[str], None]

SAGEMAKER_STAGES = (
    "load_applied",
    "desired_set",
    "instance_logging",
    *CONTAINER_MARKERS,
    "in_service",
    "traffic_recovered",
)
# Provisioning + image pull + health checks take minutes; past this the scale-out has failed.
SCALE_OUT_TIMEOUT_S = 30 * 60.0
POLL_S = 5.0
# CloudWatch Logs delivers a few seconds late: after InService the stream and its markers get
# this long to arrive before they are reported missing.
LOG_GRACE_S = 60.0
# GetLogEvents pages read per poll, so one poll stays bounded on a chatty stream.
MAX_LOG_PAGES = 20
# Beyond the recovery window itself, how long the probe may take to recover (real time).
RECOVERY_GRACE_S = 30.0
PROBE_START_TIMEOUT_S = 30.0
# Application Auto Scaling's cooldown for SageMaker when a policy sets none.
DEFAULT_COOLDOWN_S = 300
# Target tracking decides on 3 evaluation periods of its metric: 10 s high resolution, else 60 s.
TRACKING_EVALUATION_PERIODS = 3


class ScaleOutError(RuntimeError):
    """The endpoint could not scale out: it failed, vanished, or the probe died."""


def log_group(endpoint: str) -> str:
    return f"/aws/sagemaker/Endpoints/{endpoint}"


def _from_ms(epoch_ms: float) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000.0, tz=UTC)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# --- the new instance's log stream -------------------------------------------------------------


def list_streams(logs: Any, group: str, prefix: str) -> dict[str, dict[str, Any]]:
    """The log streams of `group` whose names start with `prefix`; none when there is no group."""
    from botocore.exceptions import ClientError

    streams: dict[str, dict[str, Any]] = {}
    try:
        pages = logs.get_paginator("describe_log_streams").paginate(
            logGroupName=group, logStreamNamePrefix=prefix
        )
        for page in pages:
            for stream in page.get("logStreams", []):
                streams[stream["logStreamName"]] = stream
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return {}
        raise
    return streams


def container_markers(messages: Sequence[tuple[float, str]], *, source: str) -> list[Event]:
    """The container's startup markers among log messages ((timestamp ms, message) pairs).

    Parsed as the local scale timer parses them (`TTS_MARKER {"marker", "at", …}`, the time
    the container wrote); unknown marker names and malformed lines are skipped.
    """
    from pytest_tts_scaling.endpoints.local_scaleout import marker_events

    return [
        replace(event, source=source)
        for event in marker_events(list(messages))
        if event.stage in CONTAINER_MARKERS
    ]


@dataclass
class NewInstanceLog:
    """Finds the stream that appears after the scale-out and reads its head for markers."""

    logs: Any
    group: str
    variant: str
    known: frozenset[str]
    log: Log = lambda line: None
    stream: str | None = None
    first_event_at: datetime | None = None
    markers: list[Event] = field(default_factory=list)
    _token: str | None = None

    @property
    def prefix(self) -> str:
        return f"{self.variant}/"

    @property
    def complete(self) -> bool:
        return self.first_event_at is not None and any(m.stage == "ready" for m in self.markers)

    def poll(self) -> None:
        if self.first_event_at is None:
            self._find()
        if self.stream is not None and not self.complete:
            self._read()

    def _find(self) -> None:
        new = {
            name: info
            for name, info in list_streams(self.logs, self.group, self.prefix).items()
            if name not in self.known
        }
        if not new:
            return
        # Two new streams would mean an instance was also replaced: the earliest is ours.
        name, info = min(
            new.items(),
            key=lambda item: (item[1].get("firstEventTimestamp") or float("inf"), item[0]),
        )
        if self.stream != name:
            self.stream = name
            self.log(f"ttotal: new instance log stream {self.group} {name}")
            if len(new) > 1:
                self.log(
                    f"ttotal: {len(new)} new log streams ({', '.join(sorted(new))}); timing {name}"
                )
        first = info.get("firstEventTimestamp")
        if first is not None:
            self.first_event_at = _from_ms(first)

    def _read(self) -> None:
        assert self.stream is not None
        seen = {m.stage for m in self.markers}
        for _ in range(MAX_LOG_PAGES):
            kwargs: dict[str, Any] = {
                "logGroupName": self.group,
                "logStreamName": self.stream,
                "startFromHead": True,
            }
            if self._token:
                kwargs["nextToken"] = self._token
            page = self.logs.get_log_events(**kwargs)
            source = f"log marker in {self.group} {self.stream}"
            for event in container_markers(
                [(e.get("timestamp", 0), e.get("message", "")) for e in page.get("events", [])],
                source=source,
            ):
                if event.stage not in seen:
                    seen.add(event.stage)
                    self.markers.append(event)
            token = page.get("nextForwardToken")
            if token is None or token == self._token:
                return  # the end of what has been delivered so far
            self._token = token
            if "ready" in seen:
                return

    def events(self) -> list[Event]:
        out = list(self.markers)
        if self.first_event_at is not None:
            out.append(
                Event(
                    "instance_logging",
                    self.first_event_at,
                    f"firstEventTimestamp of log stream {self.group} {self.stream} (a bound on "
                    "provisioning + image pull)",
                    bounded=True,
                )
            )
        return out


# --- in service ---------------------------------------------------------------------------------


@dataclass
class InServiceWatch:
    """Polls DescribeEndpoint until the variant's CurrentInstanceCount reaches `count`."""

    sagemaker: Any
    endpoint: str
    variant: str
    count: int
    since: datetime
    poll_s: float
    activating_at: datetime | None = None

    def poll(self, now: Callable[[], datetime]) -> Event | None:
        """The in_service event once the count is reached; `now` is read after the answer."""
        description = describe_endpoint(self.sagemaker, self.endpoint)
        if description is None:
            raise ScaleOutError(f"endpoint {self.endpoint} disappeared during the scale-out")
        status = str(description.get("EndpointStatus"))
        if status in TERMINAL_STATUSES or status == "RollingBack":
            reason = description.get("FailureReason")
            raise ScaleOutError(
                f"endpoint {self.endpoint} is {status} during the scale-out"
                + (f": {reason}" if reason else "")
            )
        variant = next(
            (
                v
                for v in description.get("ProductionVariants", [])
                if v.get("VariantName") == self.variant
            ),
            None,
        )
        if variant is None:
            raise ScaleOutError(f"variant {self.variant} of {self.endpoint} disappeared")
        for entry in variant.get("VariantStatus") or []:
            started = entry.get("StartTime")
            if entry.get("Status") == "ActivatingTraffic" and isinstance(started, datetime):
                started = _utc(started)
                if started >= self.since:
                    self.activating_at = started
        current = variant.get("CurrentInstanceCount")
        if current is None or current < self.count:
            return None
        if self.activating_at is not None:
            return Event(
                "in_service",
                self.activating_at,
                "DescribeEndpoint VariantStatus ActivatingTraffic StartTime (CurrentInstanceCount "
                f"reached {self.count})",
            )
        return Event(
            "in_service",
            now(),
            f"DescribeEndpoint CurrentInstanceCount reached {self.count} (polled every "
            f"{self.poll_s:g} s)",
            bounded=True,
        )


# --- the policy's detection lag -----------------------------------------------------------------


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


# --- the probe ----------------------------------------------------------------------------------


class Probe:
    """The closed-loop probe on its own event loop in a background thread."""

    def __init__(self, transport: Transport, make_request: MakeRequest, *, concurrency: int):
        self.transport = transport
        self.make_request = make_request
        self.concurrency = concurrency
        self.loop: ClosedLoop | None = None
        self.error: BaseException | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._running = threading.Event()
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ttotal-probe", daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        if not self._running.wait(PROBE_START_TIMEOUT_S):
            raise ScaleOutError(f"the probe did not start within {PROBE_START_TIMEOUT_S:g} s")
        self.check()
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the main thread by check()
            self.error = exc
        finally:
            self._running.set()
            self._finished.set()

    async def _main(self) -> None:
        self._event_loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.transport as transport:
            loop = ClosedLoop(transport, self.make_request, concurrency=self.concurrency)
            self.loop = loop.start()
            self._running.set()
            try:
                while not self._stop.is_set():
                    await loop.wait(0.1)
            finally:
                await loop.stop()

    def records(self) -> list[RequestRecord]:
        return list(self.loop.records) if self.loop is not None else []

    def check(self) -> None:
        """Raise in the caller's thread when the probe has died."""
        if self.error is not None:
            raise ScaleOutError(
                f"the probe failed: {type(self.error).__name__}: {self.error}"
            ) from self.error

    def run_for(self, seconds: float) -> None:
        """Hold the load for `seconds` of real time, returning early only if the probe dies."""
        if seconds > 0:
            self._finished.wait(seconds)
        self.check()

    def stop(self) -> None:
        """Stop sending; running requests get the load engine's drain time. Idempotent."""
        if self._thread.ident is None:
            return  # never started
        loop, stop = self._event_loop, self._stop
        if loop is not None and stop is not None and not self._finished.is_set():
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                loop.call_soon_threadsafe(stop.set)
        self._finished.wait(DRAIN_S + 15)


# --- the measurement ----------------------------------------------------------------------------


@dataclass
class ScaleOut:
    """One forced scale-out of a frozen endpoint, timed; `events` collects the timeline."""

    endpoint: SageMakerEndpoint
    clock: Clock
    probe: Probe
    progress: Log
    window_s: float
    threshold_ms: float
    warmup_s: float
    poll_s: float = POLL_S
    timeout_s: float = SCALE_OUT_TIMEOUT_S
    log_grace_s: float = LOG_GRACE_S
    recovery_timeout_s: float | None = None
    events: list[Event] = field(default_factory=list)
    desired_at: datetime | None = None
    recovered: bool = False
    frozen_count: int | None = None
    scaled_to: int | None = None
    new_log: NewInstanceLog | None = None

    @property
    def capacity(self) -> Capacity:
        """The variant's instances, waited on with this run's clock."""
        clients = replace(self.endpoint.clients, clock=self.clock)
        return Capacity(clients, self.endpoint.name, self.endpoint.variant)

    def run(self) -> None:
        """Probe, scale out, watch. The freeze's restore then goes from N+1 straight back to the
        snapshot's N: taking the forced instance back first would tear one down only to
        provision it again."""
        clients = self.endpoint.clients
        with aws_errors():
            _, _, desired = self.capacity.counts()
            if desired is None:
                raise ScaleOutError(f"{self.capacity.describe()}: no desired instance count")
            known = frozenset(
                list_streams(
                    clients.logs, log_group(self.endpoint.name), f"{self.endpoint.variant}/"
                )
            )
        self.frozen_count = desired
        self.new_log = NewInstanceLog(
            clients.logs,
            log_group(self.endpoint.name),
            self.endpoint.variant,
            known,
            log=self.progress,
        )
        try:
            self.probe.start()
            self.events.append(
                Event(
                    "load_applied",
                    self.clock.now(),
                    f"closed-loop probe started, N={self.probe.concurrency}",
                )
            )
            self.probe.run_for(self.warmup_s)
            self._scale_out(desired + 1)
            in_service, observed_at, observed_ns = self._until_in_service()
            self.events.append(in_service)
            assert self.desired_at is not None
            self.progress(
                f"ttotal: in service {(in_service.at - self.desired_at).total_seconds():.1f} s "
                "after the request; waiting for the probe to recover"
            )
            recovered_ns = self._until_recovered(observed_ns)
            self.probe.stop()
            self.probe.check()
            if recovered_ns is not None:
                self.recovered = True
                self.events.append(
                    Event(
                        "traffic_recovered",
                        observed_at + timedelta(microseconds=(recovered_ns - observed_ns) / 1000),
                        f"probe p95 TTFAB over {self.window_s:g} s <= {self.threshold_ms:.0f} ms",
                    )
                )
            self._finish_log()
        finally:
            self.probe.stop()
        self.events += self.new_log.events()

    def _scale_out(self, count: int) -> None:
        assert self.frozen_count is not None
        at = self.clock.now()
        with aws_errors():
            self.capacity.set(count)
        self.scaled_to = count
        self.desired_at = at
        self.events.append(
            Event(
                "desired_set",
                at,
                f"UpdateEndpointWeightsAndCapacities DesiredInstanceCount {self.frozen_count} -> "
                f"{count} (tts-bench)",
            )
        )
        self.progress(
            f"ttotal: {self.capacity.describe()}: desired instance count {self.frozen_count} -> "
            f"{count}; the clock runs"
        )

    def _until_in_service(self) -> tuple[Event, datetime, int]:
        assert self.new_log is not None
        assert self.scaled_to is not None
        assert self.desired_at is not None
        desired_at, new_log = self.desired_at, self.new_log
        watch = InServiceWatch(
            self.endpoint.clients.sagemaker,
            self.endpoint.name,
            self.endpoint.variant,
            self.scaled_to,
            since=desired_at,
            poll_s=self.poll_s,
        )

        def probe() -> tuple[Event, datetime, int] | None:
            self.probe.check()
            with aws_errors():
                had_stream = new_log.first_event_at is not None
                new_log.poll()
                if not had_stream and new_log.first_event_at is not None:
                    since = (new_log.first_event_at - desired_at).total_seconds()
                    self.progress(
                        f"ttotal: the new instance logs ({since:.0f} s after the request)"
                    )
                found = watch.poll(self.clock.now)
            if found is None:
                return None
            # The probe's monotonic time and the clock's time, read together: recovery found on
            # the one is placed on the other from here.
            return found, self.clock.now(), time.perf_counter_ns()

        return self.clock.wait_for(
            probe,
            timeout_s=self.timeout_s,
            interval_s=self.poll_s,
            what=f"{self.capacity.describe()} with {self.scaled_to} instances in service",
        )

    def _until_recovered(self, after_ns: int) -> int | None:
        """Hold the probe until a full window after `after_ns` is within the threshold."""
        limit = self.recovery_timeout_s
        if limit is None:
            limit = 4 * self.window_s + RECOVERY_GRACE_S
        give_up = time.monotonic() + limit
        step = max(0.05, min(1.0, self.window_s / 4))
        while True:
            at_ns = recovered_at_ns(
                self.probe.records(),
                after_ns=after_ns,
                window_s=self.window_s,
                threshold_ms=self.threshold_ms,
            )
            left = give_up - time.monotonic()
            if at_ns is not None or left <= 0:
                if at_ns is None:
                    self.progress(
                        f"ttotal: the probe did not recover within {limit:g} s of the new "
                        "instance entering service; traffic_recovered is left out"
                    )
                return at_ns
            self.probe.run_for(min(step, left))

    def _finish_log(self) -> None:
        """Give log delivery a bounded grace for the stream and markers not read yet."""
        new_log = self.new_log
        assert new_log is not None

        def probe() -> bool | None:
            with aws_errors():
                new_log.poll()
            return True if new_log.complete else None

        try:
            self.clock.wait_for(
                probe, timeout_s=self.log_grace_s, interval_s=self.poll_s, what="log markers"
            )
        except WaitTimeout:
            read = ", ".join(m.stage for m in new_log.markers) or "none"
            self.progress(
                f"ttotal: after {self.log_grace_s:g} s the new instance's log shows "
                f"{'no stream' if new_log.stream is None else 'markers: ' + read}; the missing "
                "stages are left out"
            )


def measure_sagemaker_ttotal(
    endpoint: Endpoint,
    qmax: QmaxArtifact,
    settings: ResolvedOptions,
    *,
    progress: Log,
    clock: Clock | None = None,
    workload: Workload | None = None,
    poll_s: float = POLL_S,
    timeout_s: float = SCALE_OUT_TIMEOUT_S,
    log_grace_s: float = LOG_GRACE_S,
    recovery_timeout_s: float | None = None,
) -> TtotalArtifact:
    """Scale a frozen SageMaker endpoint from its one instance to two and time every stage.

    `clock` (default: the endpoint's clients' clock, which the freeze itself waits on) drives
    every wait of the scale-out: provisioning, log delivery and taking the instance back.
    """
    from pytest_tts_scaling.endpoints.local_scaleout import check_comparable, ttotal_artifact
    from pytest_tts_scaling.endpoints.sagemaker import SageMakerEndpoint
    from pytest_tts_scaling.load.workload import workload_for

    if not isinstance(endpoint, SageMakerEndpoint):
        raise TypeError("the SageMaker scale timer needs a SageMakerEndpoint")
    check_comparable(qmax, endpoint, settings)
    if endpoint.inference_component:
        raise InputError(
            f"ttotal forces one more instance of {endpoint.name}/{endpoint.variant}; with "
            f"--inference-component {endpoint.inference_component} capacity is copies, which "
            "ttotal does not time: expected no --inference-component"
        )
    clock = clock or endpoint.clients.clock
    chosen = workload or workload_for(settings.run, endpoint.kind)
    concurrency, post_scale = probe_rung(qmax)
    threshold = recovery_threshold_ms(qmax, post_scale)
    lag, lag_source = read_policy_lag(endpoint.clients, endpoint.scope)
    progress(
        f"ttotal: probe N={concurrency} over {qmax.transport}; after scale-out each instance sees "
        f"{post_scale}; recovered when p95 TTFAB over {settings.measure_s:g} s <= "
        f"{threshold:.0f} ms (1.25 x the ladder's p95 at N={post_scale}); policy lag bound "
        f"{lag:g} s from {lag_source}"
    )
    transport = endpoint.transport(qmax.transport, concurrency=concurrency)
    probe = Probe(
        transport,
        lambda worker, seq: chosen.request(concurrency, worker, seq),
        concurrency=concurrency,
    )
    run = ScaleOut(
        endpoint=endpoint,
        clock=clock,
        probe=probe,
        progress=progress,
        window_s=settings.measure_s,
        threshold_ms=threshold,
        warmup_s=settings.hold_s - settings.measure_s,
        poll_s=poll_s,
        timeout_s=timeout_s,
        log_grace_s=log_grace_s,
        recovery_timeout_s=recovery_timeout_s,
    )
    with endpoint.frozen():
        run.run()
    records = probe.records()
    artifact = ttotal_artifact(
        endpoint,
        qmax,
        assemble(run.events, expected=SAGEMAKER_STAGES),
        lag_s=lag,
        lag_source=lag_source,
        probe={
            "concurrency": concurrency,
            "post_scale_concurrency": post_scale,
            "recovery_threshold_ms": round(threshold, 3),
            "recovery_window_s": settings.measure_s,
            "recovered": run.recovered,
            "requests": len(records),
            "ok": sum(1 for r in records if r.status == "ok"),
        },
        measured_at=clock.now(),
    )
    # Beyond the contract's fields: what was scaled, and where its log was read.
    return artifact.model_copy(
        update={
            "scale_out": {
                "variant": endpoint.variant,
                "from_instances": run.frozen_count,
                "to_instances": run.scaled_to,
                "log_group": log_group(endpoint.name),
                "log_stream": run.new_log.stream if run.new_log else None,
            }
        }
    )
