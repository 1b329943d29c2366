from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.calibration.disciplines import Faults
from pytest_tts_scaling.core.decoding import ResponseFormat
from pytest_tts_scaling.core.records import HangUp, RequestRecord, RequestSpec, StreamTimer
from pytest_tts_scaling.core.verdicts import RungInputs, judge
from pytest_tts_scaling.load.engine import ClosedLoop
from pytest_tts_scaling.load.transports import Session, Transport, admission_bound, error_outcome
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


@pytest.mark.timeout(60)
def test_a_stalled_answer_is_cut_at_the_stall_bound_not_drained() -> None:
    """The stop drains for up to 600 s and the server never answers the stalled request: stop()
    returns (inside the test's timeout) because the stall bound cuts it."""
    workload = Workload()
    with SerialStreamServer(
        service_s=0.02, first_audio_s=0.01, faults=Faults(stop_after=3)
    ) as server:

        async def go() -> tuple[list[RequestRecord], bool]:
            transport = HttpStreamTransport(server.base_url)
            loop = ClosedLoop(
                transport, lambda w, s: workload.request(1, w, s), concurrency=1, stall_s=0.5
            )
            loop.start()
            await loop.wait_for(lambda: len(loop.records) >= 4, timeout_s=10)
            await loop.stop(drain_s=600.0)
            return loop.records, loop.stopped_answering.is_set()

        records, silent = asyncio.run(go())
    assert [r.status for r in records[:3]] == ["ok"] * 3
    stalled = records[3]
    assert (stalled.status, stalled.error_code) == ("timeout", "stalled")
    assert stalled.latency_ms / 1000 >= 0.5  # cut no earlier than the stall bound
    assert {r.error_code for r in records[4:]} <= {"stalled", "cancelled_at_drain"}
    assert silent  # nothing was answered for the stall bound: the endpoint stopped answering


def test_a_request_queued_past_the_bound_behind_a_live_stream_waited_it_did_not_stall() -> None:
    # One slot, each answer streaming for 1.2 s: of two workers, one waits ~1.2 s for its first
    # audio while the other's audio flows. Cut at the 0.5 s bound, that wait is a queue. (This
    # server keeps a cut request's slot, so after it nothing flows: stop at the first answer.)
    workload = Workload()
    with SerialStreamServer(service_s=1.2, first_audio_s=0.05, chunks=12) as server:

        async def go() -> tuple[list[RequestRecord], bool]:
            loop = ClosedLoop(
                HttpStreamTransport(server.base_url),
                lambda w, s: workload.request(2, w, s),
                concurrency=2,
                stall_s=0.5,
            )
            loop.start()
            await loop.wait_for(
                lambda: (
                    any(r.status == "ok" for r in loop.records)
                    and any(r.error_code == "waited_past_bound" for r in loop.records)
                ),
                timeout_s=30,
            )
            silent = loop.stopped_answering.is_set()
            await loop.stop(drain_s=0)
            return list(loop.records), silent

        records, silent = asyncio.run(go())
    codes = Counter(r.error_code for r in records)
    assert codes["waited_past_bound"] >= 1
    assert "stalled" not in codes
    assert not silent
    waited = next(r for r in records if r.error_code == "waited_past_bound")
    assert (waited.status, waited.ttfab_ms) == ("timeout", None)
    assert waited.latency_ms / 1000 >= 0.5  # given up no earlier than the bound


class _PausingSession:
    """Answers like a server computing long segments: first audio at once, then `pause_s` of
    silence, then the rest; with `pause_s` 0 a chunk every 50 ms for `span_s`."""

    def __init__(self, pause_s: float, span_s: float):
        self.pause_s, self.span_s = pause_s, span_s

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        timer.started()
        timer.http_status = 200
        timer.body(b"\0" * 4800)
        if self.pause_s:
            await asyncio.sleep(self.pause_s)
        else:
            for _ in range(int(self.span_s / 0.05)):
                await asyncio.sleep(0.05)
                timer.body(b"\0" * 4800)
        timer.body(b"\0" * 4800)
        timer.finished("ok")


class _PausingTransport(Transport):
    """Worker sessions in order: the first pauses, the others stream steadily."""

    name = "pausing"

    def __init__(self, pause_s: float):
        self.pause_s = pause_s
        self.opened = 0

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        self.opened += 1
        yield _PausingSession(self.pause_s if self.opened == 1 else 0.0, 1.5 * self.pause_s)


def test_a_silent_stream_of_a_live_endpoint_underruns_and_is_not_cut() -> None:
    # After its first audio, one stream hears nothing for three stall bounds while the other
    # streams steadily: an endpoint that answers is slow on that stream, not stopped.
    workload = Workload()

    async def go() -> tuple[list[RequestRecord], bool]:
        loop = ClosedLoop(
            _PausingTransport(pause_s=0.9),
            lambda w, s: workload.request(2, w, s),
            concurrency=2,
            stall_s=0.3,
        )
        loop.start()
        await loop.wait_for(lambda: any(r.worker == 0 for r in loop.records), timeout_s=30)
        silent = loop.stopped_answering.is_set()
        await loop.stop(drain_s=0)
        return list(loop.records), silent

    records, silent = asyncio.run(go())
    paused = next(r for r in records if r.worker == 0)
    assert (paused.status, paused.error_code) == ("ok", None)
    assert max(paused.gaps_ms) >= 900
    assert not silent


class _RawAnswers:
    """A server on 127.0.0.1 that answers every request with the same raw bytes, then closes."""

    def __init__(self, answer: bytes):
        self.answer = answer

    async def __aenter__(self) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(self.answer)
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()


def one_request(answer: bytes, spec: RequestSpec | None = None) -> StreamTimer:
    async def go() -> StreamTimer:
        async with _RawAnswers(answer) as url:
            transport = HttpStreamTransport(url)
            request = spec or Workload().request(1, 0, 0)
            timer = StreamTimer(request.audio, decoder=request.decoder())
            async with transport.session() as session:
                await session.send(request, timer)
            return timer

    return asyncio.run(go())


def test_an_answer_without_a_length_ends_when_the_server_closes() -> None:
    # HTTP/1.1 allows a body delimited by the connection's close: it is a whole answer.
    audio = b"\x01\x00" * 2400
    timer = one_request(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + audio)
    assert (timer.status, timer.error_code, timer.audio_bytes) == ("ok", None, len(audio))
    assert timer.first_audio_ns is not None
    body = b'{"error":"queue_saturated","queue_depth":4,"max_queue_depth":4}'
    gated = one_request(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n" + body)
    assert (gated.status, gated.error_code) == ("rejected", "http_503:queue_saturated")
    assert gated.max_queue_depth == 4


def test_a_body_that_does_not_decode_is_a_decode_error() -> None:
    spec = RequestSpec(
        request_id="r1",
        body={"text": "hello"},
        response=ResponseFormat(kind="json", field="audio"),
    )
    lines = b"not json at all\n"
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        len(lines),
        lines,
    )
    timer = one_request(answer, spec)
    assert timer.status == "error"
    assert timer.error_code is not None
    assert timer.error_code.startswith("decode_error")


def test_an_interim_100_continue_is_not_the_answer() -> None:
    audio = b"\x01\x00" * 2400
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (
        len(audio),
        audio,
    )
    timer = one_request(answer)
    assert (timer.status, timer.http_status, timer.audio_bytes) == ("ok", 200, len(audio))


def test_a_listener_hangs_up_on_half_the_answers_and_the_rest_are_heard_whole() -> None:
    """Answers of 0.4 s audio in 4 pieces; half hung up after 0.2 s: those end at their second
    piece on a closed connection, the next request opens another, and the rung counts them
    served, with latency and audio only of the answers heard whole. Audio levels and `on_audio`
    come once the load stops, for the answers heard whole."""
    workload = Workload(hang_up=HangUp(fraction=0.5, after_audio_s=0.2))
    heard: list[tuple[RequestRecord, int]] = []
    server = SerialStreamServer(service_s=0.4, first_audio_s=0.01, chunks=4, slots=2, tone=True)
    with server:

        async def go() -> tuple[list[RequestRecord], list[RequestRecord]]:
            transport = HttpStreamTransport(server.base_url)
            loop = ClosedLoop(
                transport,
                lambda w, s: workload.request(2, w, s),
                concurrency=2,
                on_audio=lambda record, audio: heard.append((record, len(audio))),
            )
            loop.start()
            await loop.wait_for(lambda: len(loop.records) >= 12, timeout_s=60)
            in_flight = list(loop.records)
            await loop.stop()
            return in_flight, loop.records

        in_flight, records = asyncio.run(go())
    assert all(r.status == "ok" for r in records)
    hung = [r for r in records if r.hung_up]
    assert 0 < len(hung) < len(records)
    assert all(r.audio_s == pytest.approx(0.2) for r in hung)
    assert all(r.audio_s == pytest.approx(0.4) for r in records if not r.hung_up)
    # A hung-up answer ends when its last piece was read, not when the connection closed.
    assert all(r.latency_ms == pytest.approx((r.ttfab_ms or 0) + sum(r.gaps_ms)) for r in hung)
    assert all(not r.chunk_peaks for r in in_flight)
    assert all(len(r.chunk_peaks) == len(r.gaps_ms) + 1 for r in records)
    assert [r.request_id for r, _ in heard] == [r.request_id for r in records if not r.hung_up]
    assert all(size == 19200 for _, size in heard)
    rung = judge(
        RungInputs(
            concurrency=2, window=records, measure_s=1.0, concurrency_mean=2.0, concurrency_max=2.0
        ),
        1000.0,
    )
    assert (rung.hung_up, rung.completed, rung.failed) == (len(hung), len(records), 0)
    assert rung.audio_s is not None
    assert rung.audio_s.p50 == pytest.approx(0.4)
    assert rung.latency_ms.p50 is not None
    assert rung.latency_ms.p50 >= 400
