"""The fast cases of the calibration matrix, measured end to end: qmax must give the truth.

Each runs the real measurement (`run_ladder`, URL endpoint, HTTP over 127.0.0.1) against a fresh
reference server; `benchmarks/truth.py` runs the whole matrix with wall times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tts_scaling.calibration.cases import BY_NAME
from pytest_tts_scaling.steps.qmax.calibration import integer_ladder, measure

HOLD_S = 2.0


@pytest.mark.parametrize(
    "name", ["serial-fast", "2-slot-fast", "gated", "erroring", "one-burst", "truncating"]
)
def test_the_adaptive_search_gives_the_truth(name: str, tmp_path: Path) -> None:
    case = BY_NAME[name]
    lines: list[str] = []
    run = measure(case, ladder=None, hold_s=HOLD_S, artifacts_dir=tmp_path, progress=lines.append)
    assert run.outcome.matches(case.truth()), (run.outcome, case.truth(), lines)


def test_every_integer_rung_of_a_multi_slot_server_gives_the_truth(tmp_path: Path) -> None:
    """Two slots: TTFAB comes in steady waves of the service time, which must read as settled."""
    case = BY_NAME["2-slot-fast"]
    ladder = integer_ladder(case)
    assert ladder == (1, 2, 3, 4, 5, 6, 7)
    lines: list[str] = []
    run = measure(case, ladder=ladder, hold_s=HOLD_S, artifacts_dir=tmp_path, progress=lines.append)
    assert run.outcome.matches(case.truth()), (run.outcome, case.truth(), lines)
    assert run.rungs == len(ladder)


def test_a_lead_of_silence_delays_the_audible_audio_not_ttfab(tmp_path: Path) -> None:
    """Every answer sends 300 ms of silence first: audible time is TTFAB + 300 ms at N=1."""
    case = BY_NAME["lead-silence"]
    run = measure(case, ladder=(1,), hold_s=1.0, artifacts_dir=tmp_path)
    assert run.outcome.q_max == 1
    assert run.outcome.audible_leads_ms == (pytest.approx(300.0, abs=20.0),)


def test_hang_ups_on_a_server_that_frees_the_slot_raise_qmax(tmp_path: Path) -> None:
    """Every request hung up 147 ms into a 400 ms answer: Q_max 5 where answers heard to their
    end give 2, and every rung counts its hung-up requests."""
    case = BY_NAME["hang-up-frees"]
    lines: list[str] = []
    run = measure(case, ladder=(5, 6), hold_s=HOLD_S, artifacts_dir=tmp_path, progress=lines.append)
    assert run.outcome.matches(case.truth()), (run.outcome, case.truth(), lines)
    assert any("hung up" in line for line in lines)


def test_a_stall_after_the_first_piece_caps_q_max_on_the_playback_clock(tmp_path: Path) -> None:
    """First audio at 20 ms, then a 300 ms stall: at N=3 TTFAB's p95 (820 ms) meets 895 ms, but
    glitch-free playback (1095 ms) does not; the adaptive search on the playback clock finds 2."""
    case = BY_NAME["stall-after-first"]
    lines: list[str] = []
    run = measure(case, ladder=None, hold_s=HOLD_S, artifacts_dir=tmp_path, progress=lines.append)
    assert run.outcome.matches(case.truth()), (run.outcome, case.truth(), lines)
    assert run.outcome.glitch_free_leads_ms
