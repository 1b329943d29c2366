"""The listener's clocks: one answer played as it arrives, and the SLO held on any of them."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from pytest_tts_scaling.core.audio import AudioReference, peak_rises
from pytest_tts_scaling.core.compare import compare_qmax
from pytest_tts_scaling.core.playback import glitch_free_start, play_starts, played_at
from pytest_tts_scaling.core.records import RequestRecord, RequestSpec, StreamTimer
from pytest_tts_scaling.core.stats import summarize
from pytest_tts_scaling.core.verdicts import RungInputs, goodput_ms, judge, record_clock
from pytest_tts_scaling.errors import MismatchError
from tests.factories import make_qmax, make_record, make_rung, qmax_inputs

RATE = 24000
BYTES_PER_S = 2 * RATE


def tone(seconds: float, amplitude: int = 8000) -> bytes:
    """A 440 Hz tone (amplitude 0: digital silence)."""
    t = np.arange(round(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes()


def heard(pieces: list[tuple[int, bytes]], request_id: str = "x") -> RequestRecord:
    """The record of an answer whose pieces arrive at these ms from the request's start."""
    spec = RequestSpec(request_id, {"format": "pcm"})
    ticks = itertools.count(0)
    timer = StreamTimer(spec.audio, decoder=spec.decoder(), clock_ns=lambda: next(ticks))
    timer.started()
    for at_ms, data in pieces:
        timer.body(data, at_ns=at_ms * 10**6)  # the timer started at 0
    timer.finished("ok")
    return RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)


def test_a_player_waits_when_it_runs_dry_and_plays_on_when_audio_comes() -> None:
    pieces = [(100.0, 100.0), (150.0, 100.0), (500.0, 100.0)]
    assert play_starts(pieces) == [100.0, 200.0, 500.0]
    # 250 ms into the audio: the third piece's 50th ms, played from 500 ms on
    assert played_at(pieces, [0.0, 150.0, 250.0, 300.0]) == [100.0, 250.0, 550.0, None]
    # the third piece came 200 ms after the 200 ms of audio before it: start at 300 ms
    assert glitch_free_start(pieces) == 300.0
    assert glitch_free_start([(40.0, 1000.0)]) == 40.0
    assert glitch_free_start([]) is None


def test_the_running_peak_rises_where_a_threshold_is_first_crossed() -> None:
    data = np.array([0, 3, -7, 2, 7, 30, -31, 5], dtype="<i2").tobytes()
    assert peak_rises(data) == [(0, 0), (1, 3), (2, 7), (5, 30), (6, 31)]
    assert peak_rises(b"") == []


@pytest.mark.parametrize("frame", [1, 3, 240, 1000])
def test_the_rises_read_by_frames_are_every_sample_that_sets_a_new_peak(frame: int) -> None:
    """Against the definition, sample by sample, on noise, a swelling tone and silence."""
    rng = np.random.default_rng(frame)
    swell = np.sin(np.arange(3000) / 7) * np.linspace(0, 30000, 3000) * rng.random(3000)
    for samples in (rng.integers(-32768, 32768, 2500), swell, np.zeros(700)):
        data = samples.astype("<i2")
        expected, peak = [], -1
        for index, value in enumerate(abs(int(v)) for v in data):
            if value > peak:
                expected.append((index, value))
                peak = value
        assert peak_rises(data.tobytes(), frame) == expected


def test_silence_in_one_piece_with_the_speech_is_heard_after_it_plays() -> None:
    """300 ms of silence and the speech in one piece at 50 ms: it arrives at TTFAB, is heard at
    TTFAB + 300 ms; the arrival-based audible time cannot tell."""
    record = heard([(50, tone(0.3, 0) + tone(0.5))])
    reference = AudioReference(seconds={}, silence_level=0, audible=True)
    judged = reference.judged(("a", None), record, is_reference=True)
    assert judged.ttfab_ms == pytest.approx(50.0)
    assert judged.audible_ms == pytest.approx(50.0)
    # the tone's first sample is 0: its second plays 1/24 ms later
    assert judged.speech_ms == pytest.approx(350.0 + 1000 / RATE)
    assert judged.glitch_free_ms == pytest.approx(50.0)
    assert judged.underrun_ms == 0.0


def test_a_stall_after_the_first_piece_delays_glitch_free_playback() -> None:
    """100 ms of audio at 20 ms, then nothing until 320 ms: a glitch-free start at
    TTFAB + stall - audio in hand = 20 + 300 - 100 = 220 ms; the player waited 200 ms."""
    piece = tone(0.1)
    record = heard([(20, piece), (320, piece), (360, piece), (400, piece)])
    assert record.ttfab_ms == pytest.approx(20.0)
    assert record.glitch_free_ms == pytest.approx(220.0)
    assert record.underrun_ms == pytest.approx(200.0)


def rung_of(records: list[RequestRecord], slo_ms: float, metric: str) -> object:
    inputs = RungInputs(
        concurrency=1, window=records, measure_s=1.0, concurrency_mean=1, concurrency_max=1
    )
    return judge(inputs, slo_ms, metric)  # type: ignore[arg-type]


def test_the_verdict_holds_the_chosen_clock() -> None:
    records = [
        make_record(i, ttfab_ms=100.0, glitch_free_ms=400.0, speech_ms=250.0, text_chars=40)
        for i in range(20)
    ]
    on_ttfab = judge(
        RungInputs(1, records, measure_s=2.0, concurrency_mean=1, concurrency_max=1), 300
    )
    on_playback = judge(
        RungInputs(1, records, measure_s=2.0, concurrency_mean=1, concurrency_max=1),
        300,
        "playback",
    )
    assert on_ttfab.meets_slo
    assert not on_playback.meets_slo
    assert on_playback.fail_reason == "slo"
    assert on_playback.slo_metric == "playback"
    assert on_playback.judged_p95_ms == pytest.approx(400.0)
    assert on_playback.goodput_ttfab_p95_ms == pytest.approx(100.0)
    assert on_playback.speech_ms is not None
    assert on_playback.speech_ms.p50 == pytest.approx(250.0)
    assert on_playback.chars_per_s == pytest.approx(400.0)  # 20 texts of 40 characters in 2 s
    reference = AudioReference(seconds={}, silence_level=0, audible=True)
    # before the N=1 reference, the audible clock reads TTFAB (the earliest speech could play)
    assert record_clock("audible")(records[0]) == 100.0
    assert (
        record_clock("audible", reference)(make_record(0, peak_rises=((0, 5.0), (99, 7.0)))) == 7.0
    )
    # a delivered answer with no time on the clock counts above the SLO
    assert goodput_ms([make_record(0)], 300, record_clock("playback")) == [600.0]


def test_the_option_offers_every_clock_the_artifact_can_name() -> None:
    from typing import get_args

    from pytest_tts_scaling.core.schema import CLOCK_WORDS, SloMetric
    from pytest_tts_scaling.option_table import OPTION_SPECS

    spec = next(s for s in OPTION_SPECS if s.flag == "--slo-metric")
    assert spec.choices == get_args(SloMetric) == tuple(CLOCK_WORDS)


def test_an_artifact_written_before_the_clocks_reads_as_ttfab() -> None:
    rung = make_rung(3, ttfab_p95_ms=120.0, goodput_ttfab_p95_ms=130.0)
    artifact = make_qmax([rung], q_max=3)
    assert artifact.slo_metric == "ttfab"
    assert rung.judged_p95_ms == 130.0
    assert rung.judged_ms is rung.ttfab_ms


def test_the_baseline_comparison_refuses_two_clocks_and_compares_on_the_artifacts() -> None:
    def artifact(metric: str, p95: float) -> object:
        rungs = [
            make_rung(c, slo_metric=metric, glitch_free_ms=summarize([p95 * c] * 20))
            for c in (1, 2)
        ]
        return make_qmax(rungs, q_max=2, slo_metric=metric)

    with pytest.raises(MismatchError, match=r"field 'slo_metric'.*playback clock.*ttfab clock"):
        compare_qmax(artifact("playback", 100.0), artifact("ttfab", 100.0))  # type: ignore[arg-type]
    comparison = compare_qmax(artifact("playback", 100.0), artifact("playback", 200.0))  # type: ignore[arg-type]
    assert not comparison.ok
    assert [c.name for c in comparison.regressions] == ["playback_p95@N=1", "playback_p95@N=2"]


def test_the_report_and_csv_show_the_clocks_and_speech_throughput(tmp_path: Path) -> None:
    from pytest_tts_scaling.report.export import export_csv
    from pytest_tts_scaling.report.extras import rung_table_html
    from pytest_tts_scaling.report.plots import ladder_svg, listener_svg

    rungs = [
        make_rung(
            c,
            speech_ms=summarize([400.0 * c]),
            glitch_free_ms=summarize([300.0 * c]),
            chars_per_s=50.0 * c,
            audio_throughput=3.0 * c,
            slo_metric="audible",
            slo_p95_ms=400.0 * c,
            meets_slo=c == 1,
            fail_reason=None if c == 1 else "slo",
        )
        for c in (1, 2)
    ]
    artifact = make_qmax(
        rungs,
        q_max=1,
        slo_metric="audible",
        chars_per_s_at_q_max=50.0,
        audio_s_per_s_at_q_max=3.0,
    )
    table = rung_table_html(artifact)
    assert "at p95 first audible speech &le; 3000 ms" in table
    assert "glitch-free p95" in table
    assert "at Q_max 50 characters/s, 3.00 audio s/s" in table
    assert "glitch-free playback" in listener_svg(artifact)
    assert "first audible speech (ms)" in ladder_svg(artifact)
    path = tmp_path / "qmax.json"
    written = export_csv(artifact, path, tmp_path).written
    rungs_csv = next(p for p in written if p.name.endswith(".rungs.csv")).read_text()
    header, first, second = rungs_csv.splitlines()
    columns = header.split(",")
    for column in ("speech_ms.p95", "glitch_free_ms.p50", "chars_per_s", "at_q_max"):
        assert column in columns
    at = columns.index("at_q_max")
    assert (first.split(",")[at], second.split(",")[at]) == ("True", "False")


def test_a_baseline_of_another_clock_is_refused_before_anything_is_measured(
    tmp_path: Path,
) -> None:
    from pytest_tts_scaling.artifacts import save
    from pytest_tts_scaling.steps.baseline import load_baseline

    path = save(make_qmax([make_rung(1)], q_max=1, slo_metric="playback"), tmp_path / "b.json")
    inputs = qmax_inputs(baseline=path, slo_ms=3000, slo_metric="audible")
    with pytest.raises(MismatchError, match=r"playback clock, this run on the audible clock"):
        load_baseline(inputs)
    assert load_baseline(qmax_inputs(baseline=path, slo_ms=3000, slo_metric="playback"))


def test_a_payload_that_is_not_audio_has_no_playback() -> None:
    from pytest_tts_scaling.core.records import AudioFormat

    spec = RequestSpec("e", {}, audio=AudioFormat(sample_rate=0))
    ticks = itertools.count(0)
    timer = StreamTimer(spec.audio, decoder=spec.decoder(), clock_ns=lambda: next(ticks))
    timer.started()
    timer.body(b'{"embedding": [0.5]}', at_ns=5 * 10**6)
    timer.finished("ok")
    record = RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)
    assert record.ttfab_ms == pytest.approx(5.0)
    assert (record.glitch_free_ms, record.underrun_ms, record.peak_rises) == (None, None, ())
