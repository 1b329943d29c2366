"""Intelligibility under load: the answers kept while a rung runs, their WER, the quality SLO."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tts_scaling.core.audio import quality_failure
from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.optional import needs_extra
from pytest_tts_scaling.steps.qmax.quality import Answer, QualityCheck
from tests.factories import make_record, make_rung, qmax_inputs

TEXTS = {f"r{i}": f"text number {i % 3}" for i in range(12)}


def delivered(request_id: str, audio: bytes) -> tuple[RequestRecord, bytes]:
    record = make_record(
        int(request_id[1:]),
        request_id=request_id,
        audio_bytes=len(audio),
        audio_s=len(audio) / 48000,
        chunk_peaks=(1000,),
    )
    return record, audio


def hears(audio: bytes, sample_rate: int) -> str:
    """A stand-in recognizer: clean audio says its text's words; b"x" audio garbles one."""
    assert sample_rate == 24000
    text = audio.rstrip(b"x").decode()
    return text.replace("number", "lumber") if audio.endswith(b"x") else text


def run_rung(check: QualityCheck, concurrency: int, garble: bool) -> dict[str, Answer]:
    keep, kept = check.keeper(concurrency, TEXTS)
    for request_id, text in TEXTS.items():
        record, audio = delivered(request_id, text.encode() + (b"x" if garble else b""))
        keep(record, audio)
    return kept


def test_the_latest_answer_of_each_text_is_kept_up_to_the_sample() -> None:
    check = QualityCheck(sample=2, max_wer=None, max_increase=0.1, transcribe=hears)
    kept = run_rung(check, 1, garble=False)
    assert sorted(kept) == ["text number 1", "text number 2"]  # r10, r11: text 0 dropped as oldest
    assert {a.request_id for a in kept.values()} == {"r10", "r11"}
    assert sorted(check.reference) == ["text number 0", "text number 1", "text number 2"]


def test_garbled_answers_fail_the_rung_for_wer_against_n1() -> None:
    check = QualityCheck(sample=3, max_wer=None, max_increase=0.1, transcribe=hears)
    reference_kept = run_rung(check, 1, garble=False)
    first = check.judge(make_rung(1), reference_kept, set(TEXTS))
    assert (first.wer, first.wer_at_c1, first.wer_sampled, first.meets_slo) == (0.0, 0.0, 3, True)
    loaded = run_rung(check, 8, garble=True)
    rung = check.judge(make_rung(8), loaded, set(TEXTS))
    assert rung.wer == pytest.approx(1 / 3)
    assert rung.wer_at_c1 == 0.0
    assert (rung.meets_slo, rung.fail_reason) == (False, "wer")
    # answers that started outside the window are not the rung's
    assert check.judge(make_rung(8), loaded, set()).wer is None


def test_a_rung_that_failed_keeps_its_reason() -> None:
    check = QualityCheck(sample=3, max_wer=0.0, max_increase=None, transcribe=hears)
    run_rung(check, 1, garble=False)
    loaded = run_rung(check, 8, garble=True)
    failed = make_rung(8, meets_slo=False, fail_reason="slo")
    assert check.judge(failed, loaded, set(TEXTS)).fail_reason == "slo"


@pytest.mark.parametrize(
    ("wer", "at_c1", "max_wer", "max_increase", "fails"),
    [
        (0.3, 0.25, None, 0.1, False),
        (0.4, 0.25, None, 0.1, True),
        (0.4, 0.35, 0.3, None, True),
        (0.4, None, None, 0.1, False),
        (None, 0.0, 0.0, 0.0, False),
    ],
)
def test_the_quality_slo(
    wer: float | None,
    at_c1: float | None,
    max_wer: float | None,
    max_increase: float | None,
    fails: bool,
) -> None:
    assert quality_failure(wer, at_c1, max_wer, max_increase) is fails


def test_the_report_shows_wer_against_n_beside_the_p95() -> None:
    pytest.importorskip("matplotlib", reason=needs_extra("matplotlib"))
    from pytest_tts_scaling.report.extras import rung_table_html
    from pytest_tts_scaling.report.plots import ladder_svg
    from tests.factories import make_qmax

    rungs = [make_rung(1, wer=0.12, wer_at_c1=0.12), make_rung(4, wer=0.61, wer_at_c1=0.12)]
    artifact = make_qmax(rungs=rungs)
    assert "0.61 (0.12)" in rung_table_html(artifact)
    assert "word error rate" in ladder_svg(artifact)
    plain = make_qmax(rungs=[make_rung(1), make_rung(4)])
    assert "WER" not in rung_table_html(plain)
    assert "word error rate" not in ladder_svg(plain)


def test_the_options_parse_in_both_front_doors() -> None:
    import argparse

    from pytest_tts_scaling.option_table import add_to_argparse, specs_named
    from pytest_tts_scaling.options import RunOptions

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_to_argparse(parser, specs_named("--wer-sample", "--max-wer", "--max-wer-increase"))
    args = parser.parse_args(["--wer-sample", "4", "--max-wer", "0.3"])
    run = RunOptions.from_namespace(vars(args))
    assert (run.wer_sample, run.max_wer, run.max_wer_increase) == (4, 0.3, 0.1)
    with pytest.raises(argparse.ArgumentError, match="expected a whole number >= 0"):
        parser.parse_args(["--wer-sample", "-1"])


def test_the_verdict_names_the_quality_failure() -> None:
    from pytest_tts_scaling.core.verdicts import fail_words

    rung = make_rung(4, meets_slo=False, fail_reason="wer", wer=0.62, wer_at_c1=0.1, wer_sampled=3)
    assert (
        fail_words(rung, 1000) == "word error rate 0.62 against 0.10 at N=1 (3 answers transcribed)"
    )
    cut = make_rung(
        4, meets_slo=False, fail_reason="errors", failed=9, errors_by_kind={"audio_short": 9}
    )
    assert "with audio short or silent against N=1's: audio_short 9" in fail_words(cut, 1000)


def test_a_ladder_with_wer_sample_transcribes_each_rung(tmp_path: Path) -> None:
    """End to end: the engine hands answers over, the recognizer runs after each rung, the
    artifact holds the WER. A tone has no words: WER 1.0 at N=1 and at N=2, no increase."""
    pytest.importorskip("pocketsphinx", reason=needs_extra("pocketsphinx"))
    from pytest_tts_scaling.calibration.cases import FAST_SERIAL
    from pytest_tts_scaling.calibration.server import SerialStreamServer
    from pytest_tts_scaling.endpoints.base import UrlEndpoint
    from pytest_tts_scaling.steps.qmax import run_ladder

    with SerialStreamServer(discipline=FAST_SERIAL, tone=True) as server:
        settings = qmax_inputs(
            endpoint_url=server.base_url,
            slo_ms=295.0,
            ladder=(1, 2),
            hold_s=1.5,
            measure_s=1.0,
            gap_s=0.0,
            artifacts_dir=tmp_path,
            wer_sample=2,
        )
        result = run_ladder(UrlEndpoint(server.base_url), settings, progress=lambda line: None)
    rungs = {r.concurrency: r for r in result.artifact.rungs}
    assert [(rungs[n].wer, rungs[n].wer_at_c1, rungs[n].wer_sampled) for n in (1, 2)] == [
        (1.0, 1.0, 2),
        (1.0, 1.0, 2),
    ]
    assert result.artifact.q_max == 2
    assert result.artifact.settings["wer_sample"] == 2
