"""A WAV header is found in the bytes, whatever format was asked for, however it arrives."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("tts_container", reason=needs_extra("tts_container"))

import asyncio
import base64
import json
import struct

from tts_container.audio import wav_header

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.calibration.disciplines import Faults
from pytest_tts_scaling.calibration.server import PCM_BYTES_PER_S
from pytest_tts_scaling.core.decoding import JsonFieldDecoder, RawAudioDecoder, compile_field
from pytest_tts_scaling.core.records import AudioFormat, RequestRecord, RequestSpec, StreamTimer
from pytest_tts_scaling.load.engine import ClosedLoop
from pytest_tts_scaling.load.transports.http import HttpStreamTransport
from pytest_tts_scaling.load.workload import Workload

AUDIO = b"\x01\x00" * 2400  # 0.1 s at 24 kHz


def riff_header(*, rate: int = 24000, extra: bytes = b"", data_size: int = 0xFFFFFFFF) -> bytes:
    """A RIFF/WAVE header with `extra` chunks between `fmt ` and `data` (the container's
    `wav_header` writes none)."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    sizes = struct.pack("<I", 0xFFFFFFFF), struct.pack("<I", len(fmt))
    return (
        b"RIFF"
        + sizes[0]
        + b"WAVEfmt "
        + sizes[1]
        + fmt
        + extra
        + b"data"
        + struct.pack("<I", data_size)
    )


def list_chunk(text: bytes = b"INFOISFT\x05\x00\x00\x00test\x00") -> bytes:
    """A LIST chunk as encoders write it (odd sizes are padded to a word)."""
    return b"LIST" + struct.pack("<I", len(text)) + text + (b"\x00" if len(text) % 2 else b"")


def count(pieces: list[bytes]) -> tuple[int, list[int]]:
    """Audio bytes in all, and per piece, through a fresh raw-audio decoder."""
    decoder = RawAudioDecoder()
    per_piece = [decoder.feed(p) for p in pieces]
    total = sum(per_piece) + decoder.finish()
    return total, per_piece


def split_every(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize(
    "extra", [b"", list_chunk(), list_chunk(b"odd") + b"fact\x04\0\0\0\0\0\0\0"]
)
def test_header_split_anywhere_with_extra_chunks_is_skipped(extra: bytes) -> None:
    header = riff_header(extra=extra)
    for size in range(1, len(header) + 1):
        total, per_piece = count(split_every(header + AUDIO, size))
        assert total == len(AUDIO), size
        header_pieces = len(header) // size
        assert per_piece[:header_pieces] == [0] * header_pieces, size


def test_container_header_is_skipped_and_its_rate_read() -> None:
    decoder = RawAudioDecoder()
    assert decoder.feed(wav_header(16000)) == 0
    assert decoder.feed(AUDIO) == len(AUDIO)
    assert decoder.wav_bytes_per_second == 32000


def test_pcm_is_audio_even_when_it_starts_like_riff() -> None:
    assert count([b"RI", b"FX" + AUDIO]) == (len(AUDIO) + 4, [0, len(AUDIO) + 4])
    assert count([b"RIFF\0\0\0\0WAVX", AUDIO])[0] == len(AUDIO) + 12
    assert count([b"R"]) == (1, [0])  # held while undecided, audio once the body ends
    assert count([AUDIO, riff_header()]) == (len(AUDIO) + 44, [len(AUDIO), 44])


def test_one_wav_file_per_segment_and_a_trailing_chunk() -> None:
    segment = riff_header(data_size=len(AUDIO)) + AUDIO
    assert count(split_every(segment * 3, 7))[0] == 3 * len(AUDIO)
    assert count([segment + list_chunk()])[0] == len(AUDIO)


def test_wav_inside_json_lines_is_skipped_too() -> None:
    decoder = JsonFieldDecoder(compile_field("audio"), "base64", streamed=True)

    def line(data: bytes) -> bytes:
        return json.dumps({"audio": base64.b64encode(data).decode()}).encode() + b"\n"

    assert decoder.feed(line(riff_header(extra=list_chunk())[:30])) == 0
    assert decoder.feed(line(riff_header(extra=list_chunk())[30:])) == 0
    assert decoder.feed(line(AUDIO)) == len(AUDIO)


def test_ttfab_is_the_first_audio_byte_not_the_header() -> None:
    ticks = iter([0, 5_000_000, 6_000_000, 300_000_000, 310_000_000])
    spec = RequestSpec("r", {"format": "pcm"})
    timer = StreamTimer(spec.audio, decoder=spec.decoder(), clock_ns=lambda: next(ticks))
    timer.started()
    header = riff_header(rate=16000, extra=list_chunk())
    timer.body(header[:20])
    timer.body(header[20:])
    timer.body(AUDIO)
    timer.finished("ok")
    record = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)
    assert record.ttfab_ms == pytest.approx(300.0)
    assert record.audio_s == pytest.approx(len(AUDIO) / 32000)  # the header's 16 kHz


def test_wav_answer_to_a_pcm_request_over_http() -> None:
    """The issue's case: a WAV answer to a pcm request measured 0.4 ms against a true 300 ms."""
    workload = Workload()  # format pcm
    assert workload.request(1, 0, 0).body["format"] == "pcm"
    wav = Faults(wav_header=True)  # a header with a LIST chunk, sent as the answer starts
    with SerialStreamServer(service_s=0.35, first_audio_s=0.3, chunks=2, faults=wav) as server:

        async def go() -> list[RequestRecord]:
            transport = HttpStreamTransport(server.base_url)
            loop = ClosedLoop(transport, lambda w, s: workload.request(1, w, s), concurrency=1)
            loop.start()
            await loop.wait_for(lambda: len(loop.records) >= 2, timeout_s=20)
            await loop.stop()
            return loop.records

        records = [r for r in asyncio.run(go()) if r.status == "ok"]
    assert len(records) >= 2
    for record in records:
        assert record.ttfab_ms is not None
        assert record.ttfab_ms >= 300.0
        sent = server.first_audio_sent_ns[record.request_id]
        assert (record.start_ns + record.ttfab_ms * 1e6 - sent) / 1e6 < 50
        assert record.audio_bytes == 2 * int(PCM_BYTES_PER_S * 0.35 / 2)


def test_requested_format_no_longer_decides() -> None:
    assert AudioFormat().bytes_per_second == 48000
    wav_request = Workload(format="wav").request(1, 0, 0)
    assert count([b"\x00" * 100])[0] == 100  # a server ignoring format=wav: all audio
    assert wav_request.decoder().feed(b"\x00" * 100) == 100
