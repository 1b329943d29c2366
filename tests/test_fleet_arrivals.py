"""Open-loop arrival schedules and the pacer, on a fake clock (no sleeping, no network)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_tts_scaling.core import arrivals
from pytest_tts_scaling.core.arrivals import Pacer


class FakeClock:
    """A monotonic clock in ns that only moves when someone sleeps or works."""

    def __init__(self, now_ns: int = 1_000_000_000):
        self.now_ns = now_ns
        self.slept: list[float] = []

    def __call__(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)


def test_constant_rate_is_evenly_spaced_from_zero() -> None:
    times = arrivals.constant(10.0, 2.0)
    assert len(times) == 20
    np.testing.assert_allclose(np.diff(times), 0.1)
    assert times[0] == 0.0
    assert times[-1] < 2.0


def test_poisson_is_seeded_has_the_rate_and_cv_one() -> None:
    times = arrivals.poisson(200.0, 60.0, seed=3)
    again = arrivals.poisson(200.0, 60.0, seed=3)
    np.testing.assert_array_equal(times, again)
    assert not np.array_equal(times, arrivals.poisson(200.0, 60.0, seed=4))
    assert abs(len(times) / 12000 - 1) < 0.05
    rate, cv = arrivals.achieved((times * 1e9).astype(np.int64))
    assert abs(rate / 200 - 1) < 0.05
    assert cv is not None
    assert 0.95 < cv < 1.05
    assert np.all(np.diff(times) >= 0)
    assert times[-1] < 60.0


def test_steps_follow_each_level_in_turn() -> None:
    times = arrivals.steps([(2.0, 1.0), (4.0, 1.0)])
    np.testing.assert_allclose(times, [0.0, 0.5, 1.0, 1.25, 1.5, 1.75])


def test_from_rates_inverts_the_integrated_rate_and_skips_silent_steps() -> None:
    times = arrivals.from_rates([0.0, 10.0, 0.0, 5.0], dt_s=1.0)
    assert len(times) == 15
    assert np.all((times >= 1.0) & (times < 2.0) | (times >= 3.0))
    assert times[10] == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("rates", "dt_s", "arrival", "message"),
    [
        ([], 1.0, "constant", "rates must be"),
        ([-1.0], 1.0, "constant", "rates must be"),
        ([1.0], 0.0, "constant", "dt_s must be > 0"),
        ([1.0], 1.0, "bursty", "arrival must be one of constant, poisson"),
    ],
)
def test_bad_rates_name_what_was_expected(
    rates: list[float], dt_s: float, arrival: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        arrivals.from_rates(rates, dt_s=dt_s, arrival=arrival)


def test_shares_partition_the_schedule_between_processes() -> None:
    times = arrivals.poisson(50.0, 10.0, seed=1)
    parts = [arrivals.share(times, i, 3) for i in range(3)]
    assert sum(len(p) for p in parts) == len(times)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), times)
    # Each process keeps a third of the rate over the same span.
    assert all(abs(len(p) - len(times) / 3) <= 1 for p in parts)


def test_trace_round_trips_and_errors_name_the_line() -> None:
    times = [0.0, 0.25, 1.5]
    np.testing.assert_allclose(arrivals.parse_trace(arrivals.format_trace(times)), times)
    assert list(arrivals.parse_trace("# send times\n0.5\n\n1.0  # later\n")) == [0.5, 1.0]
    with pytest.raises(ValueError, match=r"surge.txt: line 2: expected a send time in seconds"):
        arrivals.parse_trace("0.1\nsoon\n", source="surge.txt")
    with pytest.raises(ValueError, match=r"line 2: expected a time >= 0 and not before"):
        arrivals.parse_trace("0.5\n0.2\n")
    with pytest.raises(ValueError, match="no send times"):
        arrivals.parse_trace("# nothing\n")


def test_pacer_releases_each_send_at_its_scheduled_time() -> None:
    clock = FakeClock()
    start = clock() + 500_000_000
    pacer = Pacer(np.array([0.0, 0.1, 0.3]), start, clock_ns=clock, sleep=clock.sleep)
    sent = []
    while (send := pacer.claim()) is not None:
        sent.append((send.index, clock() - start))
    assert sent == [(0, 0), (1, 100_000_000), (2, 300_000_000)]
    assert pacer.remaining == 0


def test_slow_answers_never_move_the_schedule_late_sends_keep_their_lag() -> None:
    """One user and answers of 250 ms against sends every 100 ms: the schedule is not stretched
    to fit the answers (coordinated omission); each send's lag behind its time is measured."""
    clock = FakeClock()
    start = clock()
    offsets = np.arange(5) * 0.1
    pacer = Pacer(offsets, start, clock_ns=clock, sleep=clock.sleep)
    lags_ms = []
    while (send := pacer.claim()) is not None:
        assert send.due_ns == start + round(offsets[send.index] * 1e9)
        lags_ms.append((clock() - send.due_ns) / 1e6)
        clock.advance(0.25)  # the answer takes 250 ms
    assert lags_ms == pytest.approx([0.0, 150.0, 300.0, 450.0, 600.0])
    late = [lag for lag in lags_ms if lag > arrivals.LATE_TOLERANCE_MS]
    assert len(late) == 4


def test_free_users_never_send_early() -> None:
    """Two users claiming back to back: the second waits for its own time, not the first's."""
    clock = FakeClock()
    pacer = Pacer(np.array([0.2, 0.7]), clock(), clock_ns=clock, sleep=clock.sleep)
    first = pacer.claim()
    second = pacer.claim()
    assert first is not None
    assert second is not None
    assert clock.slept == pytest.approx([0.2, 0.5])
    assert clock() == second.due_ns


def test_achieved_rate_and_cv_of_a_constant_schedule() -> None:
    rate, cv = arrivals.achieved([0, 250_000_000, 500_000_000, 750_000_000])
    assert rate == pytest.approx(4.0)
    assert cv == pytest.approx(0.0)
    assert arrivals.achieved([0, 1]) == (0.0, None)
