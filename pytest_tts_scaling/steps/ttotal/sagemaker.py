"""ttotal on SageMaker: force one more instance under a freeze and time every stage
(docs/steps.md#ttotal).

The endpoint is frozen (scaling suspended, one instance), a closed-loop probe runs at a rung the
qmax artifact measured, and after the warm-up UpdateEndpointWeightsAndCapacities asks for one
more instance: the clock starts. Each stage is read from its own source and says whether it is a
point or a bound (the true moment lies at or before it):

- `instance_logging`, the container's markers, `in_service`: see
  :mod:`pytest_tts_scaling.aws.scaleout.stages`.
- `traffic_recovered`: the probe's p95 TTFAB over the window is back within 1.25 × the ladder's
  p95 at the post-scale concurrency.

The policy's detection lag, which a forced scale-out bypasses, is bounded from the deployed
policy (:mod:`pytest_tts_scaling.aws.scaleout.policy_lag`) and added: T_total = measured span + lag.
Whatever happens, the freeze restores the endpoint, from N+1 instances straight back to the N it
had.

Two clocks, kept apart: every wait on AWS (scale-out, log delivery) polls with
the injected :class:`~pytest_tts_scaling.aws.clients.Clock`, so tests drive minutes of
provisioning without sleeping; the probe's warm-up and recovery window are load held for real
time, as every rung of the ladder is (:mod:`pytest_tts_scaling.aws.scaleout.probe`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pytest_tts_scaling.aws.clients import Clock, WaitTimeout, aws_errors
from pytest_tts_scaling.aws.lifecycle.capacity import Capacity
from pytest_tts_scaling.aws.scaleout.policy_lag import read_policy_lag
from pytest_tts_scaling.aws.scaleout.probe import Probe
from pytest_tts_scaling.aws.scaleout.stages import (
    InServiceWatch,
    NewInstanceLog,
    ScaleOutError,
    list_streams,
    log_group,
)
from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.core.timeline import (
    CONTAINER_MARKERS,
    Event,
    assemble,
    probe_rung,
    recovered_at_ns,
    recovery_threshold_ms,
)
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.steps.ttotal.timer import check_comparable, ttotal_artifact

if TYPE_CHECKING:
    from pytest_tts_scaling.endpoints.base import Endpoint
    from pytest_tts_scaling.endpoints.sagemaker import SageMakerEndpoint
    from pytest_tts_scaling.load.workload import Workload
    from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs

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
# Beyond the recovery window itself, how long the probe may take to recover (real time).
RECOVERY_GRACE_S = 30.0


@dataclass
class ScaleOut:
    """One forced scale-out of a frozen endpoint, timed; `events` collects the timeline."""

    endpoint: SageMakerEndpoint
    clock: Clock
    probe: Probe
    progress: Progress
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
    inputs: TtotalInputs,
    *,
    progress: Progress,
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
    from pytest_tts_scaling.endpoints.sagemaker import SageMakerEndpoint

    if not isinstance(endpoint, SageMakerEndpoint):
        raise TypeError("the SageMaker scale timer needs a SageMakerEndpoint")
    check_comparable(qmax, endpoint, inputs)
    if endpoint.inference_component:
        raise InputError(
            f"ttotal forces one more instance of {endpoint.name}/{endpoint.variant}; with "
            f"{both_flags('--inference-component')} {endpoint.inference_component} capacity is "
            "copies, which ttotal does not time: expected no inference component"
        )
    clock = clock or endpoint.clients.clock
    chosen = workload or inputs.workload.workload(endpoint.kind)
    concurrency, post_scale = probe_rung(qmax)
    threshold = recovery_threshold_ms(qmax, post_scale)
    lag, lag_source = read_policy_lag(endpoint.clients, endpoint.scope)
    progress(
        f"ttotal: probe N={concurrency} over {qmax.transport}; after scale-out each instance sees "
        f"{post_scale}; recovered when p95 TTFAB over {inputs.probe.measure_s:g} s <= "
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
        window_s=inputs.probe.measure_s,
        threshold_ms=threshold,
        warmup_s=inputs.probe.hold_s - inputs.probe.measure_s,
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
            "recovery_window_s": inputs.probe.measure_s,
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
