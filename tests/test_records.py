from __future__ import annotations

import itertools
import socket
import ssl

import pytest
from tts_container.audio import wav_header

from pytest_tts_scaling.core.records import (
    AudioFormat,
    ConnectTimeout,
    HangUp,
    RequestRecord,
    RequestSpec,
    StreamTimer,
    failure_code,
)
from pytest_tts_scaling.load.transports import named


def fake_clock(*values_ms: float) -> object:
    ticks = iter(int(v * 1e6) for v in values_ms)
    return lambda: next(ticks)


def test_wav_header_is_not_audio() -> None:
    spec = RequestSpec("r1", {"format": "wav"})
    header = wav_header(24000)
    # started at 0; header alone at 5 ms; header tail + audio at 80 ms; more audio at 120 ms.
    timer = StreamTimer(spec.audio, decoder=spec.decoder(), clock_ns=fake_clock(0, 5, 80, 120, 130))
    timer.started()
    timer.body(header[:40])
    timer.body(header[40:] + b"\x00" * 4800)
    timer.body(b"\x00" * 48000)
    timer.finished("ok")
    record = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=10)
    assert record.ttfab_ms == pytest.approx(80.0)
    assert record.audio_bytes == 4800 + 48000
    assert record.audio_s == pytest.approx(1.1)
    assert record.gaps_ms == (pytest.approx(40.0),)
    assert record.latency_ms == pytest.approx(130.0)
    assert record.underrun_ms == 0.0
    assert record.epoch_start_ns == 10


def test_pcm_underrun_and_no_audio() -> None:
    spec = RequestSpec("r2", {})
    timer = StreamTimer(spec.audio, clock_ns=fake_clock(0, 100, 1100, 1200))
    timer.started()
    timer.body(b"\x00" * 24000)  # 0.5 s of audio at 100 ms: plays until 600 ms
    timer.body(b"\x00" * 24000)  # arrives at 1100 ms: a 500 ms stall
    timer.finished("ok")
    record = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)
    assert record.underrun_ms == pytest.approx(500.0)
    silent = StreamTimer(spec.audio, clock_ns=fake_clock(0, 3))
    silent.started()
    silent.finished("rejected", "http_503:queue_saturated")
    silent.max_queue_depth = 8
    rejected = RequestRecord.from_timer(silent, spec, rung=1, worker=0, epoch_offset_ns=0)
    assert rejected.ttfab_ms is None
    assert rejected.underrun_ms is None
    assert rejected.to_json()["error_code"] == "http_503:queue_saturated"
    assert rejected.to_json()["max_queue_depth"] == 8


def test_an_answer_that_ends_well_without_audio_is_an_error() -> None:
    timer = StreamTimer(AudioFormat(), clock_ns=fake_clock(0, 1, 2))
    timer.started()
    timer.body(wav_header(24000))  # a header is not audio
    timer.finished("ok")
    assert (timer.status, timer.error_code) == ("error", "no_audio")


@pytest.mark.parametrize(
    ("error", "answered", "audio", "code"),
    [
        (ConnectionRefusedError(), False, False, "connection_refused"),
        (socket.gaierror(-2, "Name or service not known"), False, False, "dns_error"),
        (ssl.SSLCertVerificationError("bad certificate"), False, False, "tls_error"),
        (ConnectTimeout("no connection"), False, False, "connect_timeout"),
        (ConnectionResetError(), True, False, "no_audio"),
        (ConnectionResetError(), True, True, "connection_dropped"),
        (ConnectionResetError(), False, False, "connection_dropped"),
    ],
)
def test_a_broken_exchange_says_where_it_broke(
    error: BaseException, answered: bool, audio: bool, code: str
) -> None:
    timer = StreamTimer(AudioFormat())
    timer.started()
    if audio:
        timer.body(b"\x00\x00")
    # The transport names what only the socket module can tell (DNS, TLS) before the record.
    timer.failed(named(error), answered=answered)
    assert (timer.status, timer.error_code) == ("error", code)
    assert failure_code(named(error), answered=answered, audio=audio) == code


def test_clock_is_monotonic_ns_by_default() -> None:
    timer = StreamTimer(AudioFormat())
    timer.started()
    timer.body(b"\x00\x00")
    assert timer.first_audio_ns is not None
    assert timer.start_ns is not None
    assert timer.first_audio_ns >= timer.start_ns
    assert list(itertools.islice([timer.audio_bytes], 1)) == [2]


def test_a_listener_hangs_up_once_its_audio_has_arrived() -> None:
    """0.25 s of audio (12000 bytes at 48000 B/s) reached at the second piece, 60 ms in: the
    answer ends there, served, whatever the transport reads or says after it."""
    spec = RequestSpec("r1", {}, hang_up_after_s=0.25)
    timer = spec.timer()
    timer.clock_ns = fake_clock(0, 30, 60, 200)
    timer.started()
    timer.body(b"\x01\x00" * 4800)
    assert timer.hung_up_ns is None
    timer.body(b"\x01\x00" * 4800)
    assert timer.hung_up_ns == 60_000_000
    timer.finished("ok")
    record = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)
    assert (record.status, record.hung_up, record.ttfab_ms) == ("ok", True, 30.0)
    assert record.latency_ms == 60.0
    assert record.audio_s == pytest.approx(0.4)


def test_an_answer_shorter_than_the_hang_up_point_is_heard_whole() -> None:
    spec = RequestSpec("r1", {}, hang_up_after_s=1.0)
    timer = spec.timer()
    timer.clock_ns = fake_clock(0, 30, 90)
    timer.started()
    timer.body(b"\x01\x00" * 4800)
    timer.finished("ok")
    record = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)
    assert (record.hung_up, record.latency_ms) == (False, 90.0)


@pytest.mark.parametrize("fraction", [0.3, 0.5, 1 / 3, 1.0])
def test_hang_ups_hold_their_share_in_every_run_of_requests(fraction: float) -> None:
    listener = HangUp(fraction=fraction, after_audio_s=1.0)
    picks = [listener.hangs_up(i) for i in range(1000)]
    for start, length in itertools.product((0, 17, 500), (10, 100, 400)):
        share = sum(picks[start : start + length])
        assert abs(share - fraction * length) <= 1


def test_audio_levels_can_wait_until_after_the_load() -> None:
    """The engine makes records without levels as requests end and adds them after its load:
    the same record as made at once."""
    spec = RequestSpec("r1", {})
    timer = spec.timer()
    timer.started()
    timer.body(b"\x00\x00" * 2400 + b"\x10\x27" * 2400)
    timer.finished("ok")
    now = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)
    later = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0, levels=False)
    assert (later.chunk_peaks, later.audio_floor) == ((), None)
    assert later.with_levels(timer) == now
    assert now.chunk_peaks == (10000,)
