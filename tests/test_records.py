from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("tts_container", reason=needs_extra("tts_container"))

import itertools
import socket
import ssl

from tts_container.audio import wav_header

from pytest_tts_scaling.core.records import (
    AudioFormat,
    ConnectTimeout,
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
