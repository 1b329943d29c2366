"""The local fleet on 127.0.0.1: the router relays audio and the container's rejections, and the
emulated policy starts an instance under load and stops one after its cooldown.

Load comes from the qmax engine's closed loop (asyncio), not Locust, so this stays in-process.
"""

from __future__ import annotations

import asyncio
import time

from pytest_tts_scaling.calibration import Faults, SerialStreamServer
from pytest_tts_scaling.core.autoscaler import Policy
from pytest_tts_scaling.fleet.localfleet import LocalFleet
from pytest_tts_scaling.load.engine import RungRun, run_rung
from pytest_tts_scaling.load.transports.http import HttpStreamTransport
from pytest_tts_scaling.load.workload import Workload

# Short periods so a test sees whole policy cycles in seconds; requests take 0.2 s.
FAST = Policy(
    target_concurrency=3.0,
    scale_in_concurrency=1.0,
    min_instances=1,
    max_instances=2,
    scale_out_cooldown_s=0.5,
    scale_in_cooldown_s=2.0,
    provision_s=0.5,
    queue_max_depth=4,
    period_s=0.5,
    scale_out_periods=2,
    scale_in_periods=2,
)


def instance(depth: int = 0) -> SerialStreamServer:
    return SerialStreamServer(
        service_s=0.2, first_audio_s=0.05, chunks=2, slots=4, faults=Faults(max_queue_depth=depth)
    )


def closed_loop(url: str, concurrency: int, seconds: float) -> RungRun:
    workload = Workload()

    async def go() -> RungRun:
        async with HttpStreamTransport(url) as transport:
            return await run_rung(
                transport,
                lambda w, s: workload.request(concurrency, w, s),
                concurrency=concurrency,
                hold_s=seconds,
                measure_s=seconds,
            )

    return asyncio.run(go())


def wait_for(condition: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


def test_router_relays_audio_and_the_containers_rejection() -> None:
    policy = Policy(target_concurrency=100.0, scale_in_concurrency=0.0, queue_max_depth=2)
    with LocalFleet(policy, instance=lambda: instance(depth=2), initial=1) as fleet:
        run = closed_loop(fleet.base_url, 4, 1.5)
    ok = [r for r in run.records if r.status == "ok"]
    rejected = [r for r in run.records if r.status == "rejected"]
    assert ok
    assert rejected
    assert all(r.ttfab_ms is not None and r.ttfab_ms >= 50.0 for r in ok)
    assert all(r.audio_bytes == 9600 for r in ok)  # 0.2 s of 24 kHz 16-bit audio
    assert all(r.http_status == 503 and "queue_saturated" in (r.error_code or "") for r in rejected)
    turned_away = [d for d in fleet.log.dispatches if d.status == "rejected"]
    assert len(turned_away) == len(rejected)
    assert all(d.in_flight_before >= 2 for d in turned_away)


def test_policy_scales_out_under_load_and_in_after_its_cooldown() -> None:
    with LocalFleet(FAST, instance=instance, initial=1) as fleet:
        # 8 requests held against a target of 3 per instance: above it, so one more instance.
        run = closed_loop(fleet.base_url, 8, 3.0)
        # The instance scaled in stops once its requests have finished.
        assert wait_for(lambda: fleet.log.of("stopped"), 15.0), fleet.log.events
        kinds = [e.kind for e in fleet.log.events]
    assert kinds[:3] == ["out", "ready", "first_served"]
    out, ready, served = fleet.log.events[:3]
    assert ready.at_ns - out.at_ns >= FAST.provision_s * 1e9 * 0.9
    assert served.target == ready.target
    assert served.target not in fleet.log.initial
    assert ready.serving == 2
    assert {r.target for r in run.records} == {None}  # the client sees one endpoint
    assert all(r.status == "ok" for r in run.records)
    scale_in = fleet.log.of("in")[0]
    assert scale_in.serving == 1
    assert scale_in.metric is not None
    assert scale_in.metric <= FAST.scale_in_concurrency
    assert scale_in.at_ns - out.at_ns >= FAST.scale_out_cooldown_s * 1e9
    assert "stopped" in kinds
