"""The reference servers over a real socket: each serves and misbehaves exactly as its truth says.

A small raw HTTP/1.1 client (h11) times headers and body bytes itself, so these tests do not rest
on the measurement chain they exist to check. Times are asserted from below exactly (a server
cannot be early) and from above with room for a busy 2-core machine.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("tts_container", reason=needs_extra("tts_container"))

import asyncio
import gc
import json
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Literal

import h11
from tts_container.gate import InFlight

from pytest_tts_scaling.calibration import (
    Batching,
    Faults,
    RandomSlots,
    SerialStreamServer,
    Slots,
)
from pytest_tts_scaling.calibration.disciplines import ServiceTimes
from pytest_tts_scaling.calibration.server import wav_header_with_list_chunk


@dataclass
class Answer:
    sent: float = 0.0  # perf_counter when the request was written
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    headers_s: float | None = None
    body: bytearray = field(default_factory=bytearray)
    pieces: list[tuple[float, int]] = field(default_factory=list)  # (seconds since send, bytes)
    complete: bool = False
    dropped: bool = False

    @property
    def first_body_s(self) -> float:
        return self.pieces[0][0]

    def audio_s(self, skip: int = 0) -> float:
        """When the first byte past `skip` leading body bytes arrived."""
        seen = 0
        for at, size in self.pieces:
            seen += size
            if seen > skip:
                return at
        raise AssertionError("no body past the header")


async def post(
    port: int, request_id: str, timeout_s: float = 10.0, hang_up_after: int | None = None
) -> Answer:
    """One POST /invocations on its own connection; stops quietly at `timeout_s`, and closes
    the connection once `hang_up_after` body bytes came (a listener who hangs up)."""
    answer = Answer()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    connection = h11.Connection(h11.CLIENT)
    body = json.dumps({"text": "calibration", "format": "pcm", "request_id": request_id}).encode()
    head = h11.Request(
        method="POST",
        target="/invocations",
        headers=[
            ("Host", "127.0.0.1"),
            ("Content-Length", str(len(body))),
            ("X-Request-Id", request_id),
        ],
    )
    sent = answer.sent = time.perf_counter()
    writer.write(connection.send(head) + connection.send(h11.Data(data=body)))
    writer.write(connection.send(h11.EndOfMessage()))
    await writer.drain()
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    data = await reader.read(65536)
                    if not data and connection.their_state is not h11.DONE:
                        answer.dropped = True
                        break
                    connection.receive_data(data)
                elif isinstance(event, h11.Response):
                    answer.status = event.status_code
                    answer.headers_s = time.perf_counter() - sent
                    answer.headers = {k.decode(): v.decode() for k, v in event.headers}
                elif isinstance(event, h11.Data):
                    answer.pieces.append((time.perf_counter() - sent, len(event.data)))
                    answer.body += event.data
                    if hang_up_after is not None and len(answer.body) >= hang_up_after:
                        break
                elif isinstance(event, h11.EndOfMessage):
                    answer.complete = True
                    break
    except TimeoutError:
        pass
    finally:
        writer.close()
    return answer


async def ping(port: int) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.perf_counter()
    writer.write(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    await reader.readuntil(b"ok")
    writer.close()
    return time.perf_counter() - started


def together(
    port: int, count: int, timeout_s: float = 10.0, hang_up_after: int | None = None
) -> list[Answer]:
    """`count` requests sent at once, each on its own connection, in request-id order."""

    async def go() -> list[Answer]:
        return list(
            await asyncio.gather(
                *(post(port, f"r{i}", timeout_s, hang_up_after) for i in range(count))
            )
        )

    return asyncio.run(go())


def first_audio_since_first_send(answers: list[Answer]) -> list[float]:
    """Each answer's first body byte, in seconds since the earliest request was sent, sorted."""
    origin = min(a.sent for a in answers)
    return sorted(a.sent + a.first_body_s - origin for a in answers)


def test_the_serial_default_keeps_its_arguments_and_truth() -> None:
    server = SerialStreamServer(service_s=0.1, first_audio_s=0.05, chunks=4, slots=1)
    assert server.discipline == Slots(1, 0.1, 0.05)
    assert server.true_qmax(1000) == 10


def test_k_slots_serve_k_at_once_and_queue_the_rest() -> None:
    with SerialStreamServer(discipline=Slots(3, service_s=0.4, first_audio_s=0.05)) as server:
        answers = together(server.port, 6)
        assert server.peak_in_flight == 6
        assert server.wait_idle()  # the last byte can reach the client before the count
        assert set(server.first_audio_sent_ns) == {f"r{i}" for i in range(6)}
    firsts = first_audio_since_first_send(answers)
    assert all(a.complete and a.status == 200 for a in answers)
    # Three in the first wave at 50 ms, three in the next at 400 + 50 ms: never earlier, and
    # the second wave only once the first has let go of its slots (a busy machine delays both).
    assert all(t >= 0.05 for t in firsts[:3])
    assert all(t >= 0.45 for t in firsts[3:])
    origin = min(a.sent for a in answers)
    ends = sorted(a.sent + a.pieces[-1][0] - origin for a in answers)
    assert max(firsts[:3]) < ends[0] <= min(firsts[3:])


@pytest.mark.parametrize("frees", [True, False])
def test_a_hang_up_frees_the_slot_only_on_the_freeing_server(frees: bool) -> None:
    """400 ms answers of 4 pieces (0.1 s of audio each, the first at 20 ms, then every 127 ms):
    two clients each hang up after two pieces, 147 ms in. The one served second starts when
    the first hangs up on the freeing server, at the first's whole 400 ms on the other."""
    slots = Slots(1, service_s=0.4, first_audio_s=0.02)
    server = SerialStreamServer(service_s=0.4, discipline=slots, chunks=4, frees_abandoned=frees)
    with server:
        answers = together(server.port, 2, hang_up_after=2 * 4800)
        assert server.wait_idle()
        assert set(server.hung_up_ns) == ({"r0", "r1"} if frees else set())
    assert all(not a.complete and len(a.body) == 2 * 4800 for a in answers)
    firsts = first_audio_since_first_send(answers)
    assert firsts[0] >= 0.02
    if frees:
        assert 0.02 + 0.1467 <= firsts[1] < 0.42
    else:
        assert firsts[1] >= 0.42


def test_a_batch_is_served_together_in_a_plus_b_times_its_size() -> None:
    batching = Batching(fixed_s=0.1, per_request_s=0.05, max_batch=3, window_s=0.05)
    with SerialStreamServer(discipline=batching) as server:
        answers = together(server.port, 5)
    firsts = first_audio_since_first_send(answers)
    # Batch of 3 after the window: 0.05 + 0.1 + 3·0.05 = 0.30; then 2 more: + 0.05 + 0.2 = 0.55.
    first_batch = batching.window_s + batching.batch_s(3)
    second_batch = first_batch + batching.window_s + batching.batch_s(2)
    assert all(t >= first_batch for t in firsts[:3])
    assert all(t >= second_batch for t in firsts[3:])
    # A batch member gets all its audio at once, when the batch ends: the whole first batch is
    # answered before the second batch's first byte.
    assert all(answer.complete for answer in answers)
    origin = min(a.sent for a in answers)
    by_first = sorted(answers, key=lambda a: a.sent + a.first_body_s)
    assert max(a.sent + a.pieces[-1][0] - origin for a in by_first[:3]) <= min(firsts[3:])


def test_random_service_times_follow_the_seeded_draws() -> None:
    discipline = RandomSlots(1, service_s=0.2, first_audio_s=0.02, spread=0.5, seed=3)
    expected = ServiceTimes(0.2, 0.5, 3)
    with SerialStreamServer(discipline=discipline, chunks=2) as server:
        # One at a time, so each latency is its own service time.
        answers = [together(server.port, 1)[0] for _ in range(4)]
    draws = [expected.next() for _ in range(4)]
    assert len({round(d, 3) for d in draws}) == 4
    for answer, draw in zip(answers, draws, strict=True):
        assert answer.complete
        assert answer.pieces[-1][0] >= draw  # never sooner than its drawn service time


def test_the_gate_answers_503_with_the_containers_body_beyond_its_bound() -> None:
    faults = Faults(max_queue_depth=2)
    with SerialStreamServer(discipline=Slots(1, 0.5, 0.05), faults=faults) as server:
        answers = together(server.port, 3)
        assert server.peak_in_flight == 2
    [refused] = [a for a in answers if a.status == 503]
    assert refused.complete
    assert refused.headers_s is not None
    # Refused on arrival: before either admitted request (0.5 s of service) has ended.
    refused_at = refused.sent + refused.headers_s
    assert all(refused_at < a.sent + a.pieces[-1][0] for a in answers if a is not refused)
    assert refused.headers["content-type"] == "application/json"
    assert refused.headers["retry-after"] == "1"
    body = json.loads(refused.body)
    assert body == {"error": "queue_saturated", "queue_depth": 2, "max_queue_depth": 2}
    assert set(body) == set(InFlight(2).saturated_body())
    assert [a.status for a in answers if a is not refused] == [200, 200]


def test_every_kth_request_gets_headers_then_a_dropped_connection() -> None:
    with SerialStreamServer(
        discipline=Slots(1, 0.05, 0.01), faults=Faults(error_every=3)
    ) as server:
        answers = [together(server.port, 1)[0] for _ in range(6)]
        assert server.wait_idle()  # the last byte can reach the client before the count
    for index, answer in enumerate(answers):
        assert answer.status == 200
        if index % 3 == 2:
            assert answer.dropped
            assert not answer.body
        else:
            assert answer.complete
            assert answer.body


def test_wav_answers_open_with_a_riff_header_and_a_list_chunk_before_any_audio() -> None:
    header = wav_header_with_list_chunk()
    assert header[:4] == b"RIFF"
    assert header[8:12] == b"WAVE"
    assert header.index(b"LIST") < header.index(b"data") == len(header) - 8
    assert len(header) > 44
    with SerialStreamServer(
        discipline=Slots(1, 0.3, first_audio_s=0.3), faults=Faults(wav_header=True)
    ) as server:
        [answer] = together(server.port, 1)
    assert answer.headers["content-type"] == "audio/wav"
    assert bytes(answer.body[: len(header)]) == header
    assert len(answer.body) > len(header)
    # The header comes on arrival; the audio after the 300 ms the server takes to it.
    assert answer.first_body_s < answer.audio_s(skip=len(header))
    assert answer.audio_s(skip=len(header)) >= 0.3


def test_a_stalling_server_sends_headers_and_then_nothing() -> None:
    faults = Faults(stall_after_headers=True)
    with SerialStreamServer(discipline=Slots(1, 0.05, 0.01), faults=faults) as server:
        [answer] = together(server.port, 1, timeout_s=1.0)
        assert server.in_flight == 1
    assert answer.status == 200
    assert not answer.body
    assert not answer.complete
    assert not answer.dropped


def test_a_server_that_stops_answers_nothing_after_m_requests() -> None:
    faults = Faults(stop_after=2)
    with SerialStreamServer(discipline=Slots(1, 0.05, 0.01), faults=faults) as server:
        answers = [together(server.port, 1, timeout_s=1.0)[0] for _ in range(3)]
        assert server.requests_seen == 3
    assert [a.complete for a in answers] == [True, True, False]
    assert answers[2].status is None


def test_ping_is_slow_only_while_serving() -> None:
    faults = Faults(ping_delay_s=1.5)
    with SerialStreamServer(discipline=Slots(1, 3.0, 0.05), faults=faults) as server:

        async def go() -> tuple[float, float]:
            idle = await ping(server.port)
            request = asyncio.create_task(post(server.port, "busy"))
            for _ in range(1000):  # wait (bounded) until the server holds the request
                if server.in_flight:
                    break
                await asyncio.sleep(0.01)
            busy = await ping(server.port)
            request.cancel()
            return idle, busy

        idle, busy = asyncio.run(go())
    # The 1.5 s delay only while a request is held: at least that while busy, not while idle.
    assert idle < 1.5 <= busy


def test_the_server_counts_its_own_in_flight_over_a_window() -> None:
    with SerialStreamServer(discipline=Slots(2, 0.5, 0.05)) as server:
        started = time.perf_counter_ns()
        together(server.port, 4)
        ended = time.perf_counter_ns()
        # Four requests on two slots for 1 s: 4 in flight for the first half, 2 for the second.
        mean = server.mean_in_flight(started, ended)
    assert server.peak_in_flight == 4
    assert 2.0 < mean <= 4.0


@pytest.mark.parametrize("body_format", ["raw", "jsonl", "json"])
def test_every_body_format_still_streams(body_format: Literal["raw", "jsonl", "json"]) -> None:
    with SerialStreamServer(service_s=0.1, first_audio_s=0.05, body_format=body_format) as server:
        [answer] = together(server.port, 1)
    assert answer.complete
    assert answer.body
    if body_format == "json":
        assert "embedding" in json.loads(answer.body)


def test_a_shutdown_closes_connections_that_arrive_as_it_begins(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection accepted just before the shutdown (its setup still a few loop turns away)
    is closed, not dropped: a dropped socket is a ResourceWarning in whichever test runs next.
    The moment is a race, so it is tried many times with the connect spread around the exit.
    One collection at the end finds every socket dropped by any attempt: a full collection per
    attempt costs seconds in a process that holds the whole suite's objects."""
    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(str(u.exc_value)))
    for attempt in range(300):
        with SerialStreamServer() as server:
            client = socket.create_connection(("127.0.0.1", server.port))
            time.sleep(0.0002 * (attempt % 7))
        client.close()
    gc.collect()
    assert unraisable == []
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
