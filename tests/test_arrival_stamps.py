"""Plain HTTP pieces are timed by the kernel's arrival stamp, not by when the loop read them."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pytest_tts_scaling.core.records import RequestRecord, StreamTimer
from pytest_tts_scaling.load.engine import first_audio_between
from pytest_tts_scaling.load.transports.arrival import SO_TIMESTAMPNS, _read_buffer, arrival_ns
from pytest_tts_scaling.load.transports.http import HttpStreamTransport
from pytest_tts_scaling.load.workload import Workload

AUDIO = b"\x01\x00" * 2400
WAIT_S = 10.0


class _OnCue:
    """A server thread that answers one request with headers, then its audio only on cue,
    noting the monotonic clock just before and just after the audio's write."""

    def __init__(self, request_body_bytes: int = 0) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.request_read = threading.Event()
        self.cue = threading.Event()
        self.audio_sent = threading.Event()
        self.request_bytes = 0
        self.sent_between: tuple[int, int] = (0, 0)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            connection.settimeout(WAIT_S)
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(65536)
            head, body = received.split(b"\r\n\r\n", 1)
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += connection.recv(1 << 20)
            self.request_bytes = len(body)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(AUDIO))
            self.request_read.set()
            if self.cue.wait(WAIT_S):
                before = time.perf_counter_ns()
                connection.sendall(AUDIO)
                self.sent_between = (before, time.perf_counter_ns())
            self.audio_sent.set()
            connection.recv(1)  # until the client closes

    @contextmanager
    def running(self) -> Iterator[_OnCue]:
        self.thread.start()
        try:
            yield self
        finally:
            self.cue.set()
            self.listener.close()


def _one_request(
    server: _OnCue, *, block_loop_while_sent: bool, text: str = "hi", host: str = "127.0.0.1"
) -> StreamTimer:
    async def go() -> StreamTimer:
        request = Workload(texts=(text,)).request(1, 0, 0)
        timer = StreamTimer(request.audio, decoder=request.decoder())
        transport = HttpStreamTransport(f"http://{host}:{server.port}")
        async with transport.session() as session:
            sending = asyncio.create_task(session.send(request, timer))
            assert await asyncio.to_thread(server.request_read.wait, WAIT_S)
            server.cue.set()
            if block_loop_while_sent:
                # The loop is busy elsewhere while the audio arrives, and reads it only after
                # the server's write has returned.
                assert server.audio_sent.wait(WAIT_S)
            await sending
        return timer

    return asyncio.run(go())


def test_audio_read_by_a_late_loop_is_timed_when_it_arrived() -> None:
    with _OnCue().running() as server:
        timer = _one_request(server, block_loop_while_sent=True)
    before, after = server.sent_between
    assert timer.status == "ok"
    assert timer.first_audio_ns is not None
    # Read after `after` (the loop was blocked until then), stamped while the write ran.
    assert before <= timer.first_audio_ns <= after
    assert timer.first_audio_kernel_stamped


def test_a_request_larger_than_the_socket_buffer_is_written_whole() -> None:
    text = "a" * (8 << 20)
    with _OnCue().running() as server:
        timer = _one_request(server, block_loop_while_sent=False, text=text)
    assert timer.status == "ok"
    assert timer.audio_bytes == len(AUDIO)
    assert server.request_bytes > len(text)


def test_a_host_name_is_resolved_and_its_addresses_tried_in_turn() -> None:
    """`localhost` may name ::1 first; the server listens on 127.0.0.1 only."""
    with _OnCue().running() as server:
        timer = _one_request(server, block_loop_while_sent=False, host="localhost")
    assert (timer.status, timer.audio_bytes) == ("ok", len(AUDIO))


def _stamp(wall_ns: int) -> list[tuple[int, int, bytes]]:
    timespec = struct.pack("@qq", wall_ns // 1_000_000_000, wall_ns % 1_000_000_000)
    return [(socket.SOL_SOCKET, SO_TIMESTAMPNS, timespec)]


def test_arrival_is_the_read_less_what_the_kernel_held() -> None:
    read_ns, wall_ns = 5_000_000_000, 1_765_000_000_123_456_789
    assert arrival_ns(_stamp(wall_ns - 3_000_000), read_ns, wall_ns) == read_ns - 3_000_000
    # No stamp, or a foreign control message: none.
    assert arrival_ns([], read_ns, wall_ns) is None
    assert arrival_ns([(socket.SOL_SOCKET, 1, b"\0" * 16)], read_ns, wall_ns) is None
    # A wall clock stepped back since the stamp: never later than the read.
    assert arrival_ns(_stamp(wall_ns + 7_000_000), read_ns, wall_ns) == read_ns


def test_a_stamp_from_before_the_request_is_not_believed() -> None:
    """A wall clock stepped forward between arrival and read would date the bytes too early."""
    request = Workload().request(1, 0, 0)
    now = iter([1_000, 1_500])
    timer = StreamTimer(request.audio, decoder=request.decoder(), clock_ns=lambda: next(now))
    timer.started()
    timer.body(AUDIO, at_ns=400, kernel_stamped=True)
    assert (timer.first_audio_ns, timer.first_audio_kernel_stamped) == (1_500, False)


def test_records_say_which_first_audio_the_kernel_stamped_and_all_are_charged_lateness() -> None:
    """A kernel stamp is the newest bytes' of its read: a late loop that read two pieces at once
    dated the first by the second, so every answer's first audio counts toward the lateness."""
    request = Workload().request(1, 0, 0)
    records = []
    for kernel_stamped in (False, True):
        timer = StreamTimer(request.audio, decoder=request.decoder(), clock_ns=lambda: 1_000_000)
        timer.started()
        timer.body(AUDIO, at_ns=3_000_000, kernel_stamped=kernel_stamped)
        timer.finished("ok")
        record = RequestRecord.from_timer(timer, request, rung=1, worker=0, epoch_offset_ns=0)
        assert record.to_json()["first_audio_kernel_stamped"] is kernel_stamped
        records.append(record)
    assert first_audio_between(records, 0, 10_000_000) == [3_000_000, 3_000_000]


def test_connections_on_one_thread_share_one_read_buffer() -> None:
    """A buffer each would hold 256 KiB per connection until a full collection."""
    mine = _read_buffer()
    assert _read_buffer() is mine
    theirs: list[bytearray] = []
    other = threading.Thread(target=lambda: theirs.append(_read_buffer()))
    other.start()
    other.join(WAIT_S)
    assert theirs
    assert theirs[0] is not mine
