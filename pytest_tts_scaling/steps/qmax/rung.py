"""One qmax rung: held at N, extended while its evidence is thin, judged, its records kept.

A rung's window grows while it has too few completions for a p95 or its p95 interval contains
the SLO (:func:`extension_rule`), and ends early once what it holds is already a clear failure
(:func:`clear_failure_rule`); while it runs, a live line says how it is going.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pytest_tts_scaling.artifacts import append_jsonl
from pytest_tts_scaling.core.audio import AudioReference, TextKey, judge_answers
from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.core.records import RequestRecord, RequestSpec
from pytest_tts_scaling.core.schema import CLOCK_WORDS, Rung
from pytest_tts_scaling.core.search import Step
from pytest_tts_scaling.core.stats import quantile_ci, time_weighted_in_flight
from pytest_tts_scaling.core.timeline import from_epoch_ns, iso
from pytest_tts_scaling.core.verdicts import (
    RecordClock,
    RungInputs,
    delivered,
    goodput_ms,
    judge,
    record_clock,
    straddles_slo,
    ttfab,
    unusable_reason,
)
from pytest_tts_scaling.endpoints.base import Endpoint
from pytest_tts_scaling.load.engine import RungRun, ShouldEnd, ShouldExtend, WindowClock, run_rung
from pytest_tts_scaling.load.host import load_average
from pytest_tts_scaling.load.monitor import client_lag_bound_ms
from pytest_tts_scaling.load.workload import Workload
from pytest_tts_scaling.steps.qmax.health import learn_admission_bound
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from pytest_tts_scaling.steps.qmax.quality import QualityCheck

# A rung whose p95 confidence interval contains the SLO is held this many extra windows at most.
MAX_EXTENSIONS = 2
# A p95 of fewer completed requests is little more than their largest: a rung short of this many is
# held up to MAX_SAMPLE_EXTENSIONS extra windows to reach it, and flagged `few_samples` if not.
MIN_COMPLETIONS = 20
MAX_SAMPLE_EXTENSIONS = 4
# A sparse window is held for the time its rate needs to reach MIN_COMPLETIONS, this much more,
# and at least this share of a measure window.
SAMPLE_MARGIN = 1.25
SHORTEST_SAMPLE_EXTENSION = 0.25
# The longest a rung can be held: hold plus this many measure windows.
MOST_EXTENSIONS = max(MAX_EXTENSIONS, MAX_SAMPLE_EXTENSIONS)
# While a rung runs, a progress line this often (and one when its measure window opens).
PROGRESS_EVERY_S = 10.0
# A rung ends before its window does when its p95 interval at this level already lies above the
# SLO: stricter than the verdict's 95%, as the window is looked at up to ten times.
EARLY_END_LEVEL = 0.99


def iso_ns(epoch_ns: int) -> str:
    return iso(from_epoch_ns(epoch_ns))


def measure_rung(
    endpoint: Endpoint,
    inputs: QmaxInputs,
    workload: Workload,
    step: Step,
    records_path: Path,
    inputs_path: Path,
    *,
    progress: Progress,
    eta_s: Callable[[float], float],
    stall_s: float,
    reference: AudioReference | None = None,
    quality: QualityCheck | None = None,
) -> tuple[Rung, RungRun, AudioReference | None]:
    """The judged rung, what the engine heard during it (its answers judged against the audio
    `reference`), and the reference: the first rung at N=1 makes it. Progress lines while it runs.

    `stall_s`: how long a request may wait for its first audio (engine.stall_bound_s).
    `quality`: with --wer-sample, a few answers are kept and transcribed after the rung.
    """
    concurrency = step.concurrency
    clock = record_clock(inputs.slo.metric, reference)
    before = endpoint.instance_count()
    rows: list[dict[str, object]] = []
    texts: dict[str, str | None] = {}
    on_audio, kept = quality.keeper(concurrency, texts) if quality else (None, {})

    def make_request(worker: int, seq: int) -> RequestSpec:
        spec = workload.request(concurrency, worker, seq)
        rows.append(spec.input_row(rung=concurrency, worker=worker, seq=seq))
        texts[spec.request_id] = spec.text
        return spec

    heard: list[RequestRecord] = []
    ticker = _Ticker(step, inputs, progress, eta_s, rows, heard, clock)

    async def measure() -> RungRun:
        async with endpoint.transport(
            inputs.workload.transport, concurrency=concurrency
        ) as transport:
            ticking = asyncio.create_task(ticker.run())
            try:
                return await run_rung(
                    transport,
                    make_request,
                    concurrency=concurrency,
                    hold_s=inputs.ladder.hold_s,
                    measure_s=inputs.ladder.measure_s,
                    should_extend=extension_rule(
                        inputs.slo.ms,
                        inputs.ladder.measure_s,
                        ticker.extended,
                        clock,
                        inputs.slo.tiers_ms,
                    ),
                    max_extensions=MOST_EXTENSIONS,
                    should_end=clear_failure_rule(concurrency, inputs.slo.ms, heard, clock),
                    stall_s=stall_s,
                    on_record=heard.append,
                    on_audio=on_audio,
                    clock=ticker.window_clock,
                )
            finally:
                ticking.cancel()

    result = asyncio.run(measure())
    after = endpoint.instance_count()
    keys: dict[str, TextKey] = {
        str(row["request_id"]): (texts[str(row["request_id"])], _str(row["voice"])) for row in rows
    }
    result.records, reference = judge_answers(reference, concurrency, result.records, keys)
    learn_admission_bound(endpoint, result.records, f"at N={concurrency}")
    append_jsonl(records_path, [_record_row(r, result) for r in result.records])
    append_jsonl(inputs_path, rows)
    rung = _judged(result, concurrency, inputs, reference, instances=(before, after))
    if quality is not None:
        rung = quality.judge(rung, kept, {r.request_id for r in started_in_window(result)})
    return rung, result, reference


class _Ticker:
    """A rung's progress lines: when its window opens, every PROGRESS_EVERY_S until it ends
    (through its extensions and its drain), and each extension as it is granted."""

    def __init__(
        self,
        step: Step,
        inputs: QmaxInputs,
        progress: Progress,
        eta_s: Callable[[float], float],
        rows: list[dict[str, object]],
        heard: list[RequestRecord],
        clock: RecordClock,
    ) -> None:
        self.step = step
        self.inputs = inputs
        self.progress = progress
        self.eta_s = eta_s
        self.rows = rows
        self.heard = heard
        self.clock = clock
        self.window_clock = WindowClock()

    def rest_s(self) -> float:
        """The rung's time left: to its window's end, then the drain's bound."""
        window_clock = self.window_clock
        if not window_clock.end_ns:  # the engine has not started the load yet
            return self.inputs.ladder.hold_s
        now = time.perf_counter_ns()
        drain_s = window_clock.drain_s if window_clock.draining else 0
        return max(0.001, (window_clock.end_ns - now) / 1e9 + drain_s)

    def extended(self, reason: str, more_s: float) -> None:
        self.progress(
            f"qmax N={self.step.concurrency} {self.step.phase}: window extended by "
            f"{more_s:.0f} s ({reason}); run ETA {mmss(self.eta_s(self.rest_s() + more_s))}"
        )

    async def run(self) -> None:
        """Runs until cancelled, when the rung returns."""
        inputs, window_clock = self.inputs, self.window_clock
        started = time.perf_counter_ns()
        warmup_s = inputs.ladder.hold_s - inputs.ladder.measure_s
        window_start_ns = started + int(warmup_s * 1e9)
        ticks = sorted({warmup_s, *_every(PROGRESS_EVERY_S, inputs.ladder.hold_s)})
        at = ticks.pop(0)
        while True:
            await asyncio.sleep(max(0.0, at - (time.perf_counter_ns() - started) / 1e9))
            elapsed = (time.perf_counter_ns() - started) / 1e9
            if window_clock.draining:
                in_flight = len(self.rows) - len(self.heard)
                self.progress(
                    drain_line(
                        self.step, in_flight, window_clock.drain_s, self.eta_s(self.rest_s())
                    )
                )
            else:
                window_s = max(
                    inputs.ladder.measure_s, (window_clock.end_ns - window_start_ns) / 1e9
                )
                self.progress(
                    live_line(
                        self.step,
                        inputs,
                        self.heard,
                        window_start_ns,
                        elapsed,
                        self.eta_s(self.rest_s()),
                        window_s,
                        self.clock,
                    )
                )
            at = ticks.pop(0) if ticks else at + PROGRESS_EVERY_S


def _judged(
    result: RungRun,
    concurrency: int,
    inputs: QmaxInputs,
    reference: AudioReference | None,
    *,
    instances: tuple[int | None, int | None],
) -> Rung:
    """The rung judged from what the engine heard, with the client's own timekeeping."""
    before, after = instances
    lag_bound = client_lag_bound_ms(inputs.slo.ms)
    mean, peak = time_weighted_in_flight(
        [(r.start_ns, r.end_ns) for r in result.records],
        result.window_start_ns,
        result.window_end_ns,
    )
    rung = judge(
        RungInputs(
            concurrency=concurrency,
            window=started_in_window(result),
            measure_s=result.measure_s,
            concurrency_mean=mean,
            concurrency_max=peak,
            instance_count_changed=before != after,
            instance_count=after,
            window_start=iso_ns(result.window_start_ns + result.epoch_offset_ns),
            window_end=iso_ns(result.window_end_ns + result.epoch_offset_ns),
            client_lag_p99_ms=result.client.worst_lag_p99_ms,
            client_lag_bound_ms=lag_bound,
        ),
        inputs.slo.ms,
        inputs.slo.metric,
        reference,
    )
    client = result.client.model_copy(update={"lag_bound_ms": lag_bound})
    update = {
        "extensions": result.extensions,
        "ended_early": result.ended_early,
        "client": client,
        "few_samples": rung.completed < MIN_COMPLETIONS,
        "load_avg_1m": load_average(),
    }
    return rung.model_copy(update=update)


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def extension_rule(
    slo_ms: float,
    measure_s: float,
    on_extend: Callable[[str, float], None] | None = None,
    clock: RecordClock = ttfab,
    tiers_ms: tuple[float, ...] = (),
) -> ShouldExtend:
    """How much longer a rung's window must run, given the extensions so far (0: not at all).

    Too few completions for a p95 (MIN_COMPLETIONS) earn up to MAX_SAMPLE_EXTENSIONS
    extensions, so a slow or busy endpoint is judged on enough requests rather than on one: each
    as long as the rate seen so far needs to reach them (a quarter more, at least a quarter and
    at most one measure window). A p95 interval that contains the SLO earns up to
    MAX_EXTENSIONS more measure windows (the p95 on the SLO's `clock`; with SLO `tiers_ms`, one
    that contains any of them). `on_extend(reason, seconds)` hears each one granted.
    """
    granted = 0

    def grant(reason: str, more_s: float) -> float:
        nonlocal granted
        granted += 1
        if on_extend is not None:
            on_extend(reason, more_s)
        return more_s

    def should_extend(window: list[RequestRecord], window_s: float) -> float:
        completed = sum(1 for r in window if r.status == "ok")
        if completed < MIN_COMPLETIONS and granted < MAX_SAMPLE_EXTENSIONS:
            reason = f"{completed} completed, a p95 needs {MIN_COMPLETIONS}"
            if completed == 0:
                return grant(reason, measure_s)
            needed_s = SAMPLE_MARGIN * (MIN_COMPLETIONS - completed) * window_s / completed
            more_s = min(measure_s, max(SHORTEST_SAMPLE_EXTENSION * measure_s, needed_s))
            return grant(reason, more_s)
        for tier_ms in tiers_ms or (slo_ms,):
            interval = straddles_slo(window, tier_ms, clock) if granted < MAX_EXTENSIONS else None
            if interval is not None:
                reason = (
                    f"p95 interval {interval.low:.0f}-{interval.high:.0f} ms holds the SLO "
                    f"{tier_ms:g} ms"
                )
                return grant(reason, measure_s)
        return 0.0

    return should_extend


def clear_failure_rule(
    concurrency: int, slo_ms: float, heard: list[RequestRecord], clock: RecordClock = ttfab
) -> ShouldEnd:
    """Whether the requests that started in the window and have ended already make a usable rung
    whose p95 interval on the SLO's `clock` (at EARLY_END_LEVEL) lies above the SLO: the
    verdict's window would add
    the requests still running, the slowest, so it would fail as clearly. A window with no more
    than 5% above the SLO cannot, and costs one pass over the new records to rule out.
    """
    window: list[RequestRecord] = []
    scanned = above = 0

    def should_end(window_start_ns: int, now_ns: int) -> bool:
        nonlocal scanned, above
        for record in heard[scanned:]:
            if record.start_ns >= window_start_ns:
                window.append(record)
                above += not delivered(record) or (clock(record) or 0.0) > slo_ms
        scanned = len(heard)
        if len(window) < MIN_COMPLETIONS or above <= 0.05 * len(window):
            return False
        so_far = RungInputs(
            concurrency=concurrency,
            window=window,
            measure_s=(now_ns - window_start_ns) / 1e9,
            concurrency_mean=concurrency,
            concurrency_max=concurrency,
        )
        if unusable_reason(so_far, slo_ms, clock) is not None:
            return False
        interval = quantile_ci(goodput_ms(window, slo_ms, clock), level=EARLY_END_LEVEL)
        return interval is not None and interval.low > slo_ms

    return should_end


def started_in_window(result: RungRun) -> list[RequestRecord]:
    """Goodput: every request that started in the measure window counts, however it ended."""
    return [r for r in result.records if in_window(r, result)]


def in_window(record: RequestRecord, result: RungRun) -> bool:
    return result.window_start_ns <= record.start_ns < result.window_end_ns


def _record_row(record: RequestRecord, result: RungRun) -> dict[str, object]:
    row = record.to_json()
    row["in_window"] = in_window(record, result)
    return row


def _every(period_s: float, until_s: float) -> list[float]:
    return [period_s * k for k in range(1, int(until_s // period_s) + 1)]


def live_line(
    step: Step,
    inputs: QmaxInputs,
    heard: list[RequestRecord],
    window_start_ns: int,
    elapsed_s: float,
    eta_s: float,
    window_s: float | None = None,
    clock: RecordClock = ttfab,
) -> str:
    """One rung in progress: N, phase, p95 so far (on the SLO's `clock`) against the SLO, and the
    whole run's ETA. `window_s`: the measure window as extended so far (--measure-s when not)."""
    warmup_s = inputs.ladder.hold_s - inputs.ladder.measure_s
    window_s = window_s if window_s is not None else inputs.ladder.measure_s
    in_window = [r for r in heard if r.start_ns >= window_start_ns]
    if elapsed_s < warmup_s - 0.05:
        phase = f"warm-up {elapsed_s:.0f}/{warmup_s:g} s"
    else:
        extended = " (extended)" if window_s > inputs.ladder.measure_s + 0.05 else ""
        phase = f"measuring {max(0.0, elapsed_s - warmup_s):.0f}/{round(window_s, 1):g} s{extended}"
    seen, where = (in_window, "in the window") if in_window else (heard, "in the warm-up")
    goodput = goodput_ms(seen, inputs.slo.ms, clock)
    p95 = f"{float(np.percentile(goodput, 95)):.0f} ms {where}" if goodput else "n/a"
    return (
        f"qmax N={step.concurrency} {step.phase}: {phase}, p95 "
        f"{CLOCK_WORDS[inputs.slo.metric]} so far {p95} "
        f"(SLO {inputs.slo.ms:g} ms), {len(heard)} done; run ETA {mmss(eta_s)}"
    )


def drain_line(step: Step, in_flight: int, drain_s: float, eta_s: float) -> str:
    """The window has closed; the requests still in flight are given time to finish."""
    return (
        f"qmax N={step.concurrency} {step.phase}: window closed, waiting up to {drain_s:.0f} s "
        f"for {in_flight} request(s) in flight to finish; run ETA {mmss(eta_s)}"
    )


def mmss(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
