"""ttotal on the local default: time one more container from spawn to healthy traffic.

A closed-loop probe runs at a rung the qmax artifact measured, spread over the instances by fewest
outstanding requests. One more `tts-serve` is spawned (the clock starts), its log markers and
/ping are watched, it joins the probe's routing when ready, and traffic counts as recovered when
the probe's p95 TTFAB over a window is back within 1.25 × the ladder's p95 at the post-scale
concurrency. The second instance is stopped in `finally`, whatever happens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact
from pytest_tts_scaling.core.timeline import (
    DEFAULT_POLICY_LAG_S,
    STAGE_ORDER,
    Event,
    assemble,
    from_epoch_ns,
    marker_events,
    probe_rung,
    recovered_at_ns,
    recovery_threshold_ms,
)
from pytest_tts_scaling.endpoints.base import Endpoint, UrlEndpoint
from pytest_tts_scaling.endpoints.local import LocalServer
from pytest_tts_scaling.load.engine import ClosedLoop
from pytest_tts_scaling.load.workload import Workload
from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs
from pytest_tts_scaling.steps.ttotal.timer import check_comparable, ttotal_artifact

PING_EVERY_S = 0.1
# A local process has no EC2 instance whose log stream could appear.
LOCAL_STAGES = tuple(stage for stage in STAGE_ORDER if stage != "instance_logging")


def _now() -> datetime:
    return datetime.now(tz=UTC)


def measure_local_ttotal(
    endpoint: Endpoint,
    qmax: QmaxArtifact,
    inputs: TtotalInputs,
    *,
    progress: Callable[[str], None],
    workload: Workload | None = None,
    spawn: Callable[[], LocalServer] | None = None,
) -> TtotalArtifact:
    """Scale a local endpoint from one instance to two and time every stage."""
    if not isinstance(endpoint, UrlEndpoint):
        raise TypeError("the local scale timer needs an endpoint reachable by URL")
    check_comparable(qmax, endpoint, inputs)
    workload = workload or inputs.workload.workload(endpoint.kind)
    concurrency, post_scale = probe_rung(qmax)
    threshold = recovery_threshold_ms(qmax, post_scale)
    window_s = inputs.probe.measure_s
    spawn = spawn or (
        lambda: LocalServer(
            log=progress,
            env=endpoint.deployed.container_env,
            model_dir=endpoint.model_dir,
        )
    )
    progress(
        f"ttotal: probe N={concurrency} over {qmax.transport}; after scale-out each instance sees "
        f"{post_scale}; recovered when p95 TTFAB over {window_s:g} s <= {threshold:.0f} ms "
        f"(1.25 x the ladder's p95 at N={post_scale})"
    )
    events, recovered = asyncio.run(
        _probe_and_scale(endpoint, inputs, workload, concurrency, threshold, spawn, progress)
    )
    return ttotal_artifact(
        endpoint,
        qmax,
        assemble(events, expected=LOCAL_STAGES),
        lag_s=float(DEFAULT_POLICY_LAG_S),
        lag_source=(
            "assumed, no deployed policy to read: 10 s period x 3 evaluation periods + 30 s "
            "scale-out cooldown"
        ),
        probe={
            "concurrency": concurrency,
            "post_scale_concurrency": post_scale,
            "recovery_threshold_ms": round(threshold, 3),
            "recovery_window_s": window_s,
            "recovered": recovered,
        },
        measured_at=_now(),
    )


async def _probe_and_scale(
    endpoint: UrlEndpoint,
    inputs: TtotalInputs,
    workload: Workload,
    concurrency: int,
    threshold_ms: float,
    spawn: Callable[[], LocalServer],
    progress: Callable[[str], None],
) -> tuple[list[Event], bool]:
    from pytest_tts_scaling.load.transports.balanced import LeastOutstandingTransport

    def transport_for(url: str) -> object:
        return UrlEndpoint(url).transport(inputs.workload.transport, concurrency=concurrency)

    balancer = LeastOutstandingTransport(transport_for, [endpoint.base_url])  # type: ignore[arg-type]
    events = [Event("load_applied", _now(), "probe start (closed loop)")]
    loop = ClosedLoop(
        balancer, lambda w, s: workload.request(concurrency, w, s), concurrency=concurrency
    ).start()
    server: LocalServer | None = None
    recovered = False
    try:
        await loop.wait(inputs.probe.hold_s - inputs.probe.measure_s)
        events.append(Event("desired_set", _now(), "tts-bench: one more local instance requested"))
        server = spawn().start()
        deadline = time.monotonic() + server.ready_timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if server.process is not None and server.process.poll() is not None:
                    raise RuntimeError("the new local instance exited before it was ready")
                try:
                    ready = (await client.get(f"{server.base_url}/ping")).status_code == 200
                except httpx.HTTPError:
                    ready = False
                if ready:
                    break
                await loop.wait(PING_EVERY_S)
        in_service = _now()
        events.append(Event("in_service", in_service, "GET /ping 200 (polled every 0.1 s)", True))
        balancer.add(server.base_url)
        in_service_ns = time.perf_counter_ns()
        progress(
            f"ttotal: new instance in service after "
            f"{(in_service - events[1].at).total_seconds():.1f} s; waiting for recovery"
        )
        give_up = time.monotonic() + 4 * inputs.probe.measure_s + 30
        while time.monotonic() < give_up:
            await loop.wait(1.0)
            if (
                recovered_at_ns(
                    loop.records,
                    after_ns=in_service_ns,
                    window_s=inputs.probe.measure_s,
                    threshold_ms=threshold_ms,
                )
                is not None
            ):
                recovered = True
                break
    finally:
        await loop.stop()
        if server is not None:
            server.stop()
    served = [
        r for r in loop.records if server and r.target == server.base_url and r.status == "ok"
    ]
    if served:
        first = min(served, key=lambda r: r.end_ns)
        events.append(
            Event(
                "first_request_served",
                from_epoch_ns(first.end_ns + loop.epoch_offset_ns),
                "probe: first request answered by the new instance",
            )
        )
    at_ns = (
        recovered_at_ns(
            loop.records,
            after_ns=in_service_ns,
            window_s=inputs.probe.measure_s,
            threshold_ms=threshold_ms,
        )
        if recovered
        else None
    )
    if at_ns is not None:
        events.append(
            Event(
                "traffic_recovered",
                from_epoch_ns(at_ns + loop.epoch_offset_ns),
                f"probe p95 TTFAB over {inputs.probe.measure_s:g} s <= {threshold_ms:.0f} ms",
            )
        )
    if server is not None:
        events += marker_events(server.lines)
    return events, recovered
