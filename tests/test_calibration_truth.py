"""The calibration truths: closed forms, and the closed-loop simulation held against them."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace

import numpy as np
import pytest

from pytest_tts_scaling.calibration import Batching, Faults, RandomSlots, Slots
from pytest_tts_scaling.calibration.cases import BY_NAME, CASES, Case, Outcome
from pytest_tts_scaling.calibration.truth import (
    Truth,
    batching_qmax,
    closed_form_qmax,
    hang_up_point_s,
    hang_up_qmax,
    p95_ttfab_ms,
    serial_qmax,
    simulate_ttfab_s,
    simulated_qmax,
    slo_margin_ms,
    slots_qmax,
    truth_for,
)
from pytest_tts_scaling.core.records import HangUp


@pytest.mark.parametrize(
    ("service_s", "first_s", "slo_ms", "expected"),
    [(0.1, 0.05, 1000, 10), (0.05, 0.02, 295, 6), (0.2, 0.1, 150, 1), (0.3, 0.0, 2950, 10)],
)
def test_serial_closed_form_and_simulation_agree(
    service_s: float, first_s: float, slo_ms: float, expected: int
) -> None:
    slots = Slots(1, service_s, first_s)
    assert serial_qmax(service_s, first_s, slo_ms) == expected
    assert slots_qmax(slots, slo_ms) == expected
    assert simulated_qmax(slots, slo_ms) == expected


def test_serial_ttfab_is_n_minus_one_services_plus_first_audio() -> None:
    ttfab = simulate_ttfab_s(Slots(1, 0.1, 0.05), 7)
    assert ttfab.min() == pytest.approx(0.65, abs=0.001)
    assert ttfab.max() == pytest.approx(0.65, abs=0.001)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("waves", [1, 2, 4])
def test_k_slot_closed_form_and_simulation_agree(k: int, waves: int) -> None:
    service_s, first_s = 0.2, 0.05
    # The SLO halfway between the TTFAB levels of (waves − 1) and waves waits.
    slo_ms = 1000 * (first_s + (waves - 0.5) * service_s)
    slots = Slots(k, service_s, first_s)
    assert slots_qmax(slots, slo_ms) == k * waves
    assert simulated_qmax(slots, slo_ms) == k * waves


def test_k_slot_ttfab_comes_in_whole_waves_with_one_in_k_above() -> None:
    slots = Slots(4, 0.2, 0.05)
    ttfab = simulate_ttfab_s(slots, 17)  # 4 waves of 4, and one more
    levels, counts = np.unique(np.round(ttfab, 2), return_counts=True)
    assert list(levels) == [0.65, 0.85]
    assert counts[1] / counts.sum() == pytest.approx(1 / 4, abs=0.01)


def test_no_k_slot_closed_form_where_one_in_k_is_within_the_five_percent() -> None:
    wide = Slots(20, 0.2, 0.05)
    slo_ms = 1000 * (0.05 + 1.5 * 0.2)  # two waves
    assert slots_qmax(wide, slo_ms) is None
    # One request in 20 above the level is the 5% the p95 ignores: 2·20 + 1 still passes.
    assert simulated_qmax(wide, slo_ms) > 40


def test_batching_closed_form_in_one_batch_agrees_with_simulation() -> None:
    batching = Batching(fixed_s=0.04, per_request_s=0.06, max_batch=16, window_s=0.04)
    for n in (1, 5, 12, 16):
        assert p95_ttfab_ms(batching, n) == pytest.approx(1000 * (0.08 + 0.06 * n), abs=0.01)
    assert batching_qmax(batching, 830) == 12
    assert simulated_qmax(batching, 830) == 12


def test_batching_beyond_one_batch_has_no_closed_form_but_waves_of_full_batches() -> None:
    batching = Batching(fixed_s=0.05, per_request_s=0.01, max_batch=8, window_s=0.03)
    assert batching_qmax(batching, 400) is None
    full = batching.window_s + batching.batch_s(8)  # 0.16 s a full batch, window included
    for n in (9, 12, 16, 17, 20):
        # Everyone is back within the window, so full batches go round: ceil(N/8) batches.
        assert p95_ttfab_ms(batching, n) == pytest.approx(1000 * math.ceil(n / 8) * full, abs=1)
    assert simulated_qmax(batching, 400) == 16


def test_random_service_without_spread_is_the_fixed_server() -> None:
    fixed = Slots(2, 0.1, 0.03)
    random = RandomSlots(2, 0.1, 0.03, spread=0.0, seed=5)
    assert np.array_equal(simulate_ttfab_s(fixed, 9), simulate_ttfab_s(random, 9))


def test_random_service_truth_is_deterministic_and_grows_with_n() -> None:
    random = RandomSlots(1, 0.1, 0.03, spread=0.15, seed=7)
    assert np.array_equal(simulate_ttfab_s(random, 6), simulate_ttfab_s(random, 6))
    other_seed = RandomSlots(1, 0.1, 0.03, spread=0.15, seed=8)
    assert not np.array_equal(simulate_ttfab_s(random, 6), simulate_ttfab_s(other_seed, 6))
    p95 = [p95_ttfab_ms(random, n) for n in range(1, 13)]
    assert p95 == sorted(p95)
    assert closed_form_qmax(random, 1008) is None
    assert BY_NAME["random"].truth() == Truth(q_max=10, bracketed=True, source="simulation")


def test_the_random_case_separates_even_short_windows() -> None:
    """Consecutive TTFABs of a closed loop share most of their queue, so a short window's p95
    wanders; the random case's SLO still separates every 2-second window of Q_max and Q_max+1."""
    case = BY_NAME["random"]
    per_window = 20  # 10 requests a second, 2 s measured
    for n, below in ((10, True), (11, False)):
        ttfab = simulate_ttfab_s(case.discipline, n) * 1000
        windows = ttfab[: len(ttfab) // per_window * per_window].reshape(-1, per_window)
        p95 = np.percentile(windows, 95, axis=1)
        assert bool(np.all(p95 < case.slo_ms)) if below else bool(np.all(p95 > case.slo_ms))


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.truth().q_max and c.truth().error_kind is None and not c.hang_up],
    ids=lambda c: c.name,
)
def test_every_case_slo_is_far_from_the_p95_on_both_sides(case: Case) -> None:
    """On the case's own clock. (A Q_max a fault sets, truncation above K, is not decided by
    latency.)"""
    truth = case.truth()
    assert truth.q_max is not None
    assert slo_margin_ms(case.clock_discipline(), case.slo_ms, truth.q_max) >= 20


def test_the_matrix_has_several_cases_of_qmax_ten_or_more() -> None:
    big = [c.name for c in CASES if (c.truth().q_max or 0) >= 10]
    assert len(big) >= 4
    assert {c.name for c in CASES if c.fast} >= {"serial-fast", "gated", "erroring"}


def test_fault_truths() -> None:
    assert BY_NAME["erroring"].truth().failing_reason == "errors"
    assert BY_NAME["stalling"].truth().endpoint_error
    assert BY_NAME["stops"].truth().endpoint_error
    for name in ("wav", "slow-ping", "gated"):
        assert BY_NAME[name].truth() == BY_NAME["serial-fast"].truth()
    # The gate sits just above Q_max: N = Q_max + 1 fails on latency, not on rejections.
    assert BY_NAME["gated"].faults == Faults(max_queue_depth=7)


def test_an_outcome_matches_only_the_exact_answer() -> None:
    ten = Truth(q_max=10, bracketed=True, source="closed form")
    assert Outcome(q_max=10, bracketed=True).matches(ten)
    assert not Outcome(q_max=10, bracketed=False).matches(ten)
    assert not Outcome(q_max=9, bracketed=True).matches(ten)
    assert not Outcome(q_max=None, bracketed=False, error="refused").matches(ten)
    errors = Truth(q_max=None, bracketed=False, source="fault", failing_reason="errors")
    assert Outcome(q_max=None, bracketed=True, rung_reasons=("errors", "errors")).matches(errors)
    assert not Outcome(q_max=None, bracketed=True, rung_reasons=("errors", None)).matches(errors)
    assert not Outcome(q_max=None, bracketed=True).matches(errors)
    stalled = Truth(q_max=None, bracketed=False, source="fault", endpoint_error=True)
    assert Outcome(q_max=None, bracketed=False, error="stalled").matches(stalled)
    assert not Outcome(q_max=6, bracketed=True).matches(stalled)


def test_the_audio_cases_truths() -> None:
    """Truncation above K caps Q_max at K (its capacity is 6) with audio_short; a lead of
    silence keeps the capacity's Q_max and puts the audible audio 300 ms after TTFAB."""
    assert truth_for(BY_NAME["truncating"].discipline, BY_NAME["truncating"].slo_ms).q_max == 6
    truncating = BY_NAME["truncating"].truth()
    assert (truncating.q_max, truncating.bracketed, truncating.error_kind) == (
        3,
        True,
        "audio_short",
    )
    lead = BY_NAME["lead-silence"].truth()
    assert (lead.q_max, lead.audible_after_ttfab_ms) == (3, 300.0)


def simulate_hang_ups_p95_ms(
    slots: Slots, hang_up: HangUp, hang_up_s: float, *, frees: bool, concurrency: int
) -> float:
    """The steady-state p95 TTFAB of a closed loop on one slot whose listener hangs up on the
    requests `hang_up` picks, `hang_up_s` into their answers: an event-by-event simulation."""
    arrivals = [(0.0, worker, 0) for worker in range(concurrency)]
    free_at, ttfab = 0.0, []
    for _ in range(220 * concurrency):
        arrived, worker, seq = heapq.heappop(arrivals)
        start = max(arrived, free_at)
        ttfab.append(start + slots.first_audio_s - arrived)
        hung = hang_up.hangs_up(worker + seq * concurrency)
        returns = start + (hang_up_s if hung else slots.service_s)
        free_at = returns if hung and frees else start + slots.service_s
        heapq.heappush(arrivals, (returns, worker, seq + 1))
    return float(np.percentile(np.asarray(ttfab[20 * concurrency :]) * 1000, 95))


@pytest.mark.parametrize("name", ["hang-up-frees", "hang-up-keeps"])
def test_hang_up_closed_forms_agree_with_the_simulation_and_stand_clear_of_the_slo(
    name: str,
) -> None:
    case = BY_NAME[name]
    assert case.hang_up is not None
    slots = case.discipline
    assert isinstance(slots, Slots)
    point_s = hang_up_point_s(slots, 4, case.hang_up.after_audio_s)
    assert point_s == pytest.approx(0.02 + 0.38 / 3)
    p95 = {
        n: simulate_hang_ups_p95_ms(
            slots, case.hang_up, point_s, frees=case.frees_abandoned, concurrency=n
        )
        for n in range(1, 9)
    }
    q_max = case.truth().q_max
    assert q_max == max(n for n, ms in p95.items() if ms <= case.slo_ms)
    assert q_max == hang_up_qmax(slots, point_s, frees=case.frees_abandoned, slo_ms=case.slo_ms)
    assert min(case.slo_ms - p95[q_max], p95[q_max + 1] - case.slo_ms) >= 20


def test_hang_ups_move_qmax_each_way() -> None:
    """Against the same server heard to the end: up where the slot is freed, down where it is
    not (the worker that hung up waits behind its own abandoned answer)."""
    frees, keeps = BY_NAME["hang-up-frees"], BY_NAME["hang-up-keeps"]
    assert (frees.truth().q_max, truth_for(frees.discipline, frees.slo_ms).q_max) == (5, 2)
    assert (keeps.truth().q_max, truth_for(keeps.discipline, keeps.slo_ms).q_max) == (2, 3)
    assert frees.truth().hangs_up
    assert keeps.truth().hangs_up
    with pytest.raises(ValueError, match="no closed form"):
        replace(keeps, frees_abandoned=True).truth()


def test_the_listener_clock_cases_truths() -> None:
    """Silence in one piece with the speech is heard 300 ms after TTFAB, so on the audible clock
    Q_max is 3 where TTFAB's would be 4; a stall of 300 ms after 25 ms of audio puts glitch-free
    playback 275 ms after TTFAB, so on the playback clock Q_max is 2 where TTFAB's would be 3.
    Both SLOs lie at least 199 ms from the p95 of Q_max and of Q_max + 1 on their clock."""
    joined = BY_NAME["lead-in-one-piece"]
    stall = BY_NAME["stall-after-first"]
    assert (joined.slo_metric, stall.slo_metric) == ("audible", "playback")
    # 0.1 s of audio in 4 pieces; with the joined silence the last piece (at 400 ms, after
    # 375 ms of audio) is the one playback waits for: 5 ms after TTFAB
    assert joined.clock_offsets_s() == pytest.approx(
        {"ttfab": 0.02, "audible": 0.32, "playback": 0.025}
    )
    assert stall.clock_offsets_s() == pytest.approx(
        {"ttfab": 0.02, "audible": 0.02, "playback": 0.295}
    )
    heard, playing = joined.truth(), stall.truth()
    assert (heard.q_max, heard.bracketed) == (3, True)
    assert heard.audible_after_ttfab_ms == pytest.approx(300.0)
    assert heard.glitch_free_after_ttfab_ms == pytest.approx(5.0)
    assert (playing.q_max, playing.bracketed) == (2, True)
    assert playing.glitch_free_after_ttfab_ms == pytest.approx(275.0)
    assert playing.audible_after_ttfab_ms is None  # zeros: nothing to hear
    assert truth_for(joined.discipline, joined.slo_ms).q_max == 4
    assert truth_for(stall.discipline, stall.slo_ms).q_max == 3
    for case in (joined, stall):
        q_max = case.truth().q_max
        assert q_max is not None
        assert slo_margin_ms(case.clock_discipline(), case.slo_ms, q_max) > 199.0
    # the existing lead of silence, sent apart: heard when it has played; its last piece, too,
    # comes 5 ms after the audio before it would have played out
    lead = BY_NAME["lead-silence"].truth()
    assert lead.audible_after_ttfab_ms == pytest.approx(300.0)
    assert lead.glitch_free_after_ttfab_ms == pytest.approx(5.0)


def test_a_leads_check_needs_every_rung_within_tolerance() -> None:
    truth = Truth(q_max=2, bracketed=True, source="closed form", glitch_free_after_ttfab_ms=275.0)
    assert Outcome(q_max=2, bracketed=True, glitch_free_leads_ms=(270.0, 285.0)).matches(truth)
    assert not Outcome(q_max=2, bracketed=True, glitch_free_leads_ms=(270.0, 300.0)).matches(truth)
    assert not Outcome(q_max=2, bracketed=True).matches(truth)
