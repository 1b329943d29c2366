from __future__ import annotations

import asyncio
import time
from collections import Counter

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.calibration.disciplines import Faults
from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.core.verdicts import RungInputs, judge
from pytest_tts_scaling.load.engine import ClosedLoop
from pytest_tts_scaling.load.transports import admission_bound, error_outcome
from pytest_tts_scaling.load.transports.balanced import LeastOutstandingTransport
from pytest_tts_scaling.load.transports.http import HttpStreamTransport
from pytest_tts_scaling.load.workload import Workload


def test_error_outcome_reads_the_json_code() -> None:
    assert error_outcome(503, b'{"error":"queue_saturated","queue_depth":2}') == (
        "rejected",
        "http_503:queue_saturated",
    )
    assert error_outcome(429, b"slow down") == ("rejected", "http_429")
    assert error_outcome(400, b'{"error":"invalid_text"}') == ("error", "http_400:invalid_text")


def test_admission_bound_is_read_from_the_503_body() -> None:
    body = b'{"error":"queue_saturated","queue_depth":8,"max_queue_depth":8}'
    assert admission_bound(body) == 8
    assert admission_bound(b'{"error":"queue_saturated"}') is None
    assert admission_bound(b'{"max_queue_depth":"8"}') is None
    assert admission_bound(b"<html>busy</html>") is None


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
    assert set(outcomes) == {"error:connection_refused"}


def test_one_answer_in_ten_without_audio_is_counted_as_an_error() -> None:
    """Headers, then the connection drops: `no_audio`, counted among the rung's failures."""
    workload = Workload()
    drops = Faults(error_every=10)
    with SerialStreamServer(service_s=0.01, first_audio_s=0.005, slots=2, faults=drops) as server:

        async def go() -> list[RequestRecord]:
            transport = HttpStreamTransport(server.base_url)
            loop = ClosedLoop(transport, lambda w, s: workload.request(2, w, s), concurrency=2)
            loop.start()
            await loop.wait_for(lambda: len(loop.records) >= 60, timeout_s=60)
            await loop.stop()
            return loop.records

        records = asyncio.run(go())
    served = server.requests_seen
    failed = [r for r in records if r.status != "ok"]
    assert {(r.status, r.error_code, r.http_status) for r in failed} == {("error", "no_audio", 200)}
    assert len(failed) == served // 10
    assert all(r.ttfab_ms is None for r in failed)
    rung = judge(
        RungInputs(
            concurrency=2, window=records, measure_s=1.0, concurrency_mean=2.0, concurrency_max=2.0
        ),
        1000.0,
    )
    assert rung.failed == len(failed)
    assert rung.completed == len(records) - len(failed)


def test_a_stalled_answer_is_cut_at_the_stall_bound_not_drained_for_30_s() -> None:
    workload = Workload()
    with SerialStreamServer(
        service_s=0.02, first_audio_s=0.01, faults=Faults(stop_after=3)
    ) as server:

        async def go() -> tuple[list[RequestRecord], float, bool]:
            transport = HttpStreamTransport(server.base_url)
            loop = ClosedLoop(
                transport, lambda w, s: workload.request(1, w, s), concurrency=1, stall_s=0.5
            )
            loop.start()
            await loop.wait_for(lambda: len(loop.records) >= 4, timeout_s=10)
            started = time.monotonic()
            await loop.stop()
            return loop.records, time.monotonic() - started, loop.stopped_answering.is_set()

        records, stop_s, silent = asyncio.run(go())
    assert [r.status for r in records[:3]] == ["ok"] * 3
    stalled = records[3]
    assert (stalled.status, stalled.error_code) == ("timeout", "stalled")
    assert 0.5 <= stalled.latency_ms / 1000 < 1.0
    assert {r.error_code for r in records[4:]} <= {"stalled", "cancelled_at_drain"}
    assert silent  # nothing was answered for the stall bound: the endpoint stopped answering
    assert stop_s < 2.0
