from __future__ import annotations

import asyncio
from collections import Counter

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.loadgen import ClosedLoop
from pytest_tts_scaling.transports import error_outcome
from pytest_tts_scaling.transports.balanced import LeastOutstandingTransport
from pytest_tts_scaling.transports.http import HttpStreamTransport
from pytest_tts_scaling.workload import Workload


def test_error_outcome_reads_the_json_code() -> None:
    assert error_outcome(503, b'{"error":"queue_saturated","queue_depth":2}') == (
        "rejected",
        "queue_saturated",
    )
    assert error_outcome(429, b"slow down") == ("rejected", "http_429")
    assert error_outcome(400, b'{"error":"invalid_text"}') == ("error", "invalid_text")


def test_least_outstanding_spreads_and_adds_instances() -> None:
    workload = Workload()
    with SerialStreamServer(service_s=0.05) as a, SerialStreamServer(service_s=0.05) as b:

        async def go() -> list[str | None]:
            balancer = LeastOutstandingTransport(HttpStreamTransport, [a.base_url])
            loop = ClosedLoop(balancer, lambda w, s: workload.request(4, w, s), concurrency=4)
            loop.start()
            await loop.wait(0.6)
            balancer.add(b.base_url)
            added_at = len(loop.records)
            await loop.wait(0.8)
            await loop.stop()
            assert all(r.status == "ok" for r in loop.records)
            assert {r.target for r in loop.records[:added_at]} == {a.base_url}
            return [r.target for r in loop.records[added_at:]]

        after = Counter(asyncio.run(go()))
    # Two serial instances behind least-outstanding routing each take about half.
    assert after[a.base_url] > 0
    assert after[b.base_url] > 0
    assert 0.3 < after[b.base_url] / sum(after.values()) < 0.7


def test_connection_refused_is_a_failed_request_not_a_crash() -> None:
    workload = Workload()

    async def go() -> list[str]:
        transport = HttpStreamTransport("http://127.0.0.1:9")
        loop = ClosedLoop(transport, lambda w, s: workload.request(1, w, s), concurrency=1)
        loop.start()
        await loop.wait(0.3)
        await loop.stop()
        return [f"{r.status}:{r.error_code}" for r in loop.records]

    outcomes = asyncio.run(go())
    assert outcomes
    assert set(outcomes) == {"error:ConnectionRefusedError"}
