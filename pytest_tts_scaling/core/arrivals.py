"""When requests are sent: open-loop arrival schedules, and pacing them by the clock. Pure.

An open loop sends request k at its scheduled time whatever happened to the requests before it
(real users arrive whether or not the fleet keeps up). A schedule is the sorted send times in
seconds from the start; a load of several processes gives process i every P-th arrival, so the
processes together send exactly the schedule. A send that leaves after its time is *late*; the
lag is kept with the request and reported, never hidden by re-timing the schedule (no
coordinated omission).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

Arrival = str  # "constant" | "poisson"
ARRIVALS: tuple[Arrival, ...] = ("constant", "poisson")
# A send more than this behind its scheduled time counts as late.
LATE_TOLERANCE_MS = 5.0


def from_rates(
    rates_rps: ArrayLike, *, dt_s: float, arrival: Arrival = "constant", seed: int = 0
) -> NDArray[np.float64]:
    """Send times for a rate that is piecewise constant over steps of `dt_s` seconds.

    The k-th send is where the integrated rate reaches k (constant) or the k-th point of a unit
    Poisson process mapped through that integral (poisson: time rescaling), so a step trace, a
    plan's surge and a plain `--rate` all go through one definition.
    """
    rates = np.asarray(rates_rps, dtype=float).ravel()
    if dt_s <= 0:
        raise ValueError(f"dt_s must be > 0, got {dt_s}")
    if rates.size == 0 or not np.all(np.isfinite(rates)) or np.any(rates < 0):
        raise ValueError("rates must be one or more finite numbers >= 0")
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    edges = np.concatenate(([0.0], np.cumsum(rates * dt_s)))  # arrivals expected by each edge
    total = float(edges[-1])
    if arrival == "constant":
        marks = np.arange(0.0, total - 1e-9, 1.0)
    else:
        rng = np.random.default_rng(seed)
        gaps = rng.exponential(1.0, size=int(total + 10 * math.sqrt(total + 1) + 10))
        marks = np.cumsum(gaps)  # the points of a unit-rate Poisson process
        marks = marks[marks < total]
    times = np.arange(rates.size + 1, dtype=float) * dt_s
    # Invert the integrated rate, a non-decreasing piecewise-linear function of time.
    step = np.searchsorted(edges, marks, side="right") - 1
    step = np.clip(step, 0, rates.size - 1)
    within = (marks - edges[step]) / np.where(rates[step] > 0, rates[step], np.inf)
    return np.asarray(times[step] + within, dtype=float)


def constant(rate_rps: float, duration_s: float) -> NDArray[np.float64]:
    """`rate_rps` evenly spaced sends per second for `duration_s`."""
    return from_rates([rate_rps], dt_s=duration_s)


def poisson(rate_rps: float, duration_s: float, *, seed: int = 0) -> NDArray[np.float64]:
    """Exponential gaps of mean 1/`rate_rps`, seeded, for `duration_s`."""
    return from_rates([rate_rps], dt_s=duration_s, arrival="poisson", seed=seed)


def steps(
    levels: Sequence[tuple[float, float]], *, arrival: Arrival = "constant", seed: int = 0
) -> NDArray[np.float64]:
    """(rate, seconds) levels one after another, e.g. a step test 10 rps 60 s then 20 rps 60 s."""
    if not levels or any(seconds <= 0 or rate < 0 for rate, seconds in levels):
        raise ValueError("steps need one or more (rate >= 0, seconds > 0) levels")
    out: list[NDArray[np.float64]] = []
    offset = 0.0
    for i, (rate, seconds) in enumerate(levels):
        out.append(offset + from_rates([rate], dt_s=seconds, arrival=arrival, seed=seed + i))
        offset += seconds
    return np.concatenate(out)


def parse_trace(text: str, *, source: str = "trace") -> NDArray[np.float64]:
    """Send times in seconds, one a line ('#' starts a comment), not decreasing, >= 0."""
    values: list[float] = []
    for number, line in enumerate(text.splitlines(), start=1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise ValueError(
                f"{source}: line {number}: expected a send time in seconds, got {item!r}"
            ) from None
        if not math.isfinite(value) or value < 0 or (values and value < values[-1]):
            raise ValueError(
                f"{source}: line {number}: expected a time >= 0 and not before the line above, "
                f"got {item}"
            )
        values.append(value)
    if not values:
        raise ValueError(f"{source}: no send times; expected one time in seconds per line")
    return np.asarray(values, dtype=float)


def format_trace(times: ArrayLike) -> str:
    """The text :func:`parse_trace` reads back (microsecond resolution)."""
    return "".join(f"{t:.6f}\n" for t in np.asarray(times, dtype=float).ravel())


def share(times: NDArray[np.float64], index: int, count: int) -> NDArray[np.float64]:
    """Process `index` of `count` sends every `count`-th arrival, starting at its own index."""
    if not 0 <= index < count:
        raise ValueError(f"expected 0 <= index < count, got {index} of {count}")
    return times[index::count]


@dataclass(frozen=True)
class Send:
    """One claimed arrival: its position in this process's share and when it was due (ns)."""

    index: int
    due_ns: int


class Pacer:
    """Hands this process's arrivals to free users in order, each released at its due time.

    A user claims the next arrival only when it is free, so when every user is busy the arrival
    waits and leaves late; its lag is measured from the schedule, not from when a user freed.
    """

    def __init__(
        self,
        offsets_s: ArrayLike,
        start_ns: int,
        *,
        clock_ns: Callable[[], int],
        sleep: Callable[[float], None],
    ):
        self.due_ns = [start_ns + round(float(t) * 1e9) for t in np.asarray(offsets_s).ravel()]
        self.clock_ns = clock_ns
        self.sleep = sleep
        self.next = 0

    def claim(self) -> Send | None:
        """The next arrival (None when the schedule is spent), after sleeping until it is due."""
        if self.next >= len(self.due_ns):
            return None
        send = Send(self.next, self.due_ns[self.next])
        self.next += 1
        wait_ns = send.due_ns - self.clock_ns()
        if wait_ns > 0:
            self.sleep(wait_ns / 1e9)
        return send

    @property
    def remaining(self) -> int:
        return len(self.due_ns) - self.next


def achieved(send_ns: ArrayLike) -> tuple[float, float | None]:
    """Achieved rate (sends per second over the span of send times) and the inter-arrival CV.

    n sends span n − 1 gaps. The CV is the gaps' std over their mean: 0 for a constant rate,
    about 1 for Poisson arrivals. Both need at least three sends.
    """
    ordered = np.sort(np.asarray(send_ns, dtype=float))
    if ordered.size < 3:
        return 0.0, None
    gaps = np.diff(ordered) / 1e9
    mean = float(gaps.mean())
    if mean <= 0:
        return 0.0, None
    return 1.0 / mean, float(gaps.std(ddof=1)) / mean
