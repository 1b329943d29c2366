"""The audio checks against the endpoint's own answers at N=1: short, silent, audible time."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from tts_container.audio import wav_header

from pytest_tts_scaling.core.audio import (
    AUDIO_SHORT,
    AUDIO_SILENT,
    AudioReference,
    judge_answers,
    levels,
)
from pytest_tts_scaling.core.records import RequestRecord, RequestSpec, StreamTimer
from pytest_tts_scaling.core.verdicts import RungInputs, judge
from tests.factories import make_record

RATE = 24000


def pcm(*parts: tuple[float, int]) -> bytes:
    """(seconds, amplitude) pieces of a 440 Hz tone (amplitude 0: digital silence)."""
    out = []
    for seconds, amplitude in parts:
        t = np.arange(round(seconds * RATE)) / RATE
        out.append((amplitude * np.sin(2 * np.pi * 440 * t)).astype("<i2"))
    return np.concatenate(out).tobytes()


def answer(chunks: list[bytes], request_id: str = "r", *, wav: bool = False) -> RequestRecord:
    """A record of an answer whose chunks arrive 100 ms apart from 50 ms on."""
    spec = RequestSpec(request_id, {"format": "wav" if wav else "pcm"})
    ticks = iter(int(v * 1e6) for v in itertools.count(0, 50))
    timer = StreamTimer(spec.audio, decoder=spec.decoder(), clock_ns=lambda: next(ticks))
    timer.started()
    for i, chunk in enumerate(chunks):
        timer.body(
            (wav_header(RATE) if wav and i == 0 else b"") + chunk, at_ns=(50 + 100 * i) * 10**6
        )
    timer.finished("ok")
    return RequestRecord.from_timer(timer, spec, rung=1, worker=0, epoch_offset_ns=0)


def split(data: bytes, parts: int) -> list[bytes]:
    size = -(-len(data) // parts)
    return [data[i : i + size] for i in range(0, len(data), size)]


SPEECH = pcm((0.2, 0), (0.6, 8000))  # 0.8 s: quiet lead, then "speech"


def test_levels_per_chunk_and_floor() -> None:
    data = pcm((0.1, 0), (0.1, 1000))
    peaks, floor = levels(data, [4800, 1, 4799], frame=240)
    assert peaks[0] == 0
    assert peaks[2] == pytest.approx(1000, abs=2)
    assert floor == 0
    assert levels(b"", [0], frame=240) == ([0], 0)
    gap = levels(data, [4800, 0, 4800], frame=240)[0]  # a chunk that carried no whole sample
    assert gap[:2] == [0, 0]
    assert gap[2] == pytest.approx(1000, abs=2)
    # shorter than a frame: the floor is the whole answer's peak
    assert levels(pcm((0.001, 500)), [48], frame=240)[1] > 0


def test_the_record_carries_levels_behind_a_wav_header() -> None:
    record = answer(split(SPEECH, 4), wav=True)
    assert len(record.chunk_peaks) == 4
    assert record.chunk_peaks[0] == 0
    assert min(record.chunk_peaks[1:]) > 7000
    assert record.audio_floor == 0
    assert record.to_json()["chunk_peaks"] == list(record.chunk_peaks)


def reference_from(records: list[RequestRecord], text: str = "a") -> AudioReference:
    keys = {r.request_id: (text, "v") for r in records}
    judged, reference = judge_answers(None, 1, records, keys)
    assert reference is not None
    assert all(r.status == "ok" for r in judged)  # the reference rung judges no one
    return reference


def test_short_and_silent_answers_are_errors_named_by_kind() -> None:
    reference = reference_from([answer(split(SPEECH, 4), "r0")])
    assert reference.audible
    assert reference.silence_level == 0
    whole = answer(split(SPEECH, 4), "ok")
    cut = answer(split(SPEECH, 4)[:3], "cut")  # 0.6 s of 0.8: 25% short
    quiet = answer(split(pcm((0.8, 0)), 4), "quiet")
    other_text = answer(split(SPEECH, 4)[:2], "other")
    keys = {r.request_id: ("a", "v") for r in (whole, cut, quiet)} | {"other": ("b", "v")}
    judged, same = judge_answers(reference, 4, [whole, cut, quiet, other_text], keys)
    assert same is reference
    by_id = {r.request_id: r for r in judged}
    assert by_id["ok"].status == "ok"
    assert by_id["ok"].error_code is None
    assert (by_id["cut"].status, by_id["cut"].error_code) == ("error", AUDIO_SHORT)
    assert (by_id["quiet"].status, by_id["quiet"].error_code) == ("error", AUDIO_SILENT)
    assert by_id["other"].status == "ok"  # no reference for its text: only silence is judged
    rung = judge(
        RungInputs(
            concurrency=4, window=judged, measure_s=1.0, concurrency_mean=4, concurrency_max=4
        ),
        slo_ms=1000,
    )
    assert rung.errors_by_kind == {AUDIO_SHORT: 1, AUDIO_SILENT: 1}
    assert rung.fail_reason == "errors"


def test_a_rung_of_only_wrong_answers_fails_for_its_errors() -> None:
    """Every answer came, and every one was cut: the rung is decided, not `nothing_completed`."""
    reference = reference_from([answer(split(SPEECH, 4), "r0")])
    cut = [answer(split(SPEECH, 4)[:2], f"c{i}") for i in range(5)]
    judged, _ = judge_answers(reference, 4, cut, {r.request_id: ("a", "v") for r in cut})
    rung = judge(
        RungInputs(
            concurrency=4, window=judged, measure_s=1.0, concurrency_mean=4, concurrency_max=4
        ),
        slo_ms=1000,
    )
    assert rung.usable
    assert rung.fail_reason == "errors"
    assert rung.errors_by_kind == {AUDIO_SHORT: 5}


def test_within_tolerance_is_not_short() -> None:
    reference = reference_from([answer([SPEECH], "r0")])
    slightly = answer([SPEECH[: int(len(SPEECH) * 0.92) // 2 * 2]], "x")
    assert reference.verdict(("a", "v"), slightly) is None


def test_a_text_whose_answers_at_n1_differ_has_no_reference_length() -> None:
    """Durations drawn rather than set by the text (a stochastic duration model): a later short
    answer is that endpoint's normal, not a cut; silence is still judged."""
    reference = reference_from([answer([SPEECH], "r0"), answer([SPEECH[: len(SPEECH) // 2]], "r1")])
    assert reference.seconds == {}
    half = answer([SPEECH[len(SPEECH) // 2 :]], "x")  # the speech, half as long
    assert reference.verdict(("a", "v"), half) is None
    assert reference.verdict(("a", "v"), answer([pcm((0.8, 0))], "q")) == AUDIO_SILENT


def test_audible_time_is_the_first_chunk_above_the_silence_level() -> None:
    reference = reference_from([answer(split(SPEECH, 4), "r0")])
    judged = reference.judged(("a", "v"), answer(split(SPEECH, 4), "x"), is_reference=False)
    # chunk 0 (50 ms) is the quiet lead; chunk 1 (150 ms) is the first audible
    assert judged.ttfab_ms == pytest.approx(50.0)
    assert judged.audible_ms == pytest.approx(150.0)
    rung = judge(
        RungInputs(
            concurrency=1, window=[judged], measure_s=1.0, concurrency_mean=1, concurrency_max=1
        ),
        slo_ms=1000,
    )
    assert rung.audible_ms is not None
    assert rung.audible_ms.p50 == pytest.approx(150.0)


@pytest.mark.parametrize("constant", [pcm((0.8, 0)), pcm((0.8, 8000))])
def test_constant_answers_keep_their_verdicts(constant: bytes) -> None:
    """Zeros, or a steady tone: no answer rises above the silence level, so none is silent."""
    reference = reference_from([answer(split(constant, 4), "r0")])
    assert not reference.audible
    judged, _ = judge_answers(reference, 8, [answer(split(constant, 4), "x")], {"x": ("a", "v")})
    assert judged[0].status == "ok"
    assert judged[0].audible_ms is None


def test_nothing_is_judged_before_the_reference() -> None:
    records = [answer([pcm((0.1, 0))], "x")]
    judged, reference = judge_answers(None, 4, records, {})
    assert reference is None
    assert judged == records


def test_records_without_levels_are_not_judged() -> None:
    record: Any = make_record(1, audio_s=0.01)
    reference = AudioReference(seconds={("a", None): 5.0}, silence_level=0, audible=True)
    assert reference.verdict(("a", None), record) is None


def test_the_report_shows_the_audible_time_beside_ttfab() -> None:
    from pytest_tts_scaling.core.stats import summarize
    from pytest_tts_scaling.report.extras import rung_table_html
    from pytest_tts_scaling.report.plots import ladder_svg
    from tests.factories import make_qmax, make_rung

    rungs = [make_rung(1, audible_ms=summarize([123.0, 456.0])), make_rung(2)]
    artifact = make_qmax(rungs=rungs)
    table = rung_table_html(artifact)
    assert "audible p95" in table
    assert "439.3" in table  # p95 of the two
    assert "first audible" in ladder_svg(artifact)
    assert "first audible" not in ladder_svg(make_qmax(rungs=[make_rung(1), make_rung(2)]))


def test_an_answer_the_listener_hung_up_on_is_neither_short_nor_silent_nor_a_reference() -> None:
    """Cut by the client's choice, before its speech even: not judged, and at N=1 it sets no
    reference length."""
    reference = reference_from([answer(split(SPEECH, 4), "r0")])
    early = replace(answer(split(SPEECH, 4)[:1], "early"), hung_up=True)
    assert reference.verdict(("a", "v"), early) is None
    hung_reference = reference_from([early, answer(split(SPEECH, 4), "r1")])
    assert hung_reference.seconds == {("a", "v"): pytest.approx(0.8)}
