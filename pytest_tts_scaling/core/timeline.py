"""The scale-out timeline (docs/steps.md#ttotal): stages from their sources, assembled. Pure.

Every stage carries where it was read from and whether it is a bound (the true moment lies at or
before it) rather than a point. T_total = measured span (desired_set → the last stage reached) +
the policy's detection lag, which a forced scale-out bypasses and so must be added back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.core.schema import QmaxArtifact, Stage
from pytest_tts_scaling.errors import InputError

# The order stages happen in. Not every endpoint has every stage (a local process has no EC2
# instance to log), but those present must follow this order.
# The container's own startup markers (its log lines), in the order it writes them.
CONTAINER_MARKERS: tuple[str, ...] = (
    "container_started",
    "framework_init",
    "weights_ready",
    "warmup_done",
    "ready",
)
STAGE_ORDER: tuple[str, ...] = (
    "load_applied",
    "desired_set",
    "instance_logging",
    *CONTAINER_MARKERS,
    "in_service",
    "first_request_served",
    "traffic_recovered",
)
# How the container prefixes each startup marker line (its markers module writes them).
MARKER_PREFIX = "TTS_MARKER "
# A probe p95 within this factor of the ladder's p95 at the post-scale concurrency is recovered.
RECOVERY_FACTOR = 1.25
# Without a deployed policy to read: 10 s high-resolution period × 3 evaluation periods + a 30 s
# scale-out cooldown, the published method's bound.
DEFAULT_POLICY_LAG_S = 10 * 3 + 30


@dataclass(frozen=True)
class Event:
    stage: str
    at: datetime
    source: str
    bounded: bool = False


@dataclass(frozen=True)
class Timeline:
    stages: list[Stage]
    t_measured_s: float
    dominant_stage: str | None
    missing: list[str]
    out_of_order: list[str]


def from_epoch_ns(epoch_ns: int) -> datetime:
    return datetime.fromtimestamp(epoch_ns / 1e9, tz=UTC)


def iso(at: datetime) -> str:
    """The one time format on disk: ISO 8601 in UTC with `Z` (naive values are taken as UTC)."""
    utc = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return utc.isoformat().replace("+00:00", "Z")


def parse_iso(value: str) -> datetime:
    """ISO 8601 read back leniently: `Z`, any offset, or none (taken as UTC); aware UTC out.

    Raises ValueError, which each caller turns into its own message naming the field.
    """
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def marker_events(lines: list[tuple[float, str]]) -> list[Event]:
    """The container's own startup markers, read from its output."""
    events: list[Event] = []
    for _, line in lines:
        _, found, payload = line.partition(MARKER_PREFIX)
        if not found:
            continue
        try:
            marker = json.loads(payload)
            at = parse_iso(marker["at"])
        except (ValueError, KeyError, TypeError):
            continue
        events.append(Event(marker["marker"], at, "container log marker"))
    return events


def assemble(events: Iterable[Event], expected: Sequence[str] = STAGE_ORDER) -> Timeline:
    """Order events by stage, time each stage from its predecessor, name the dominant one.

    An event earlier than a stage it must follow (clock skew between sources) is kept but clamped
    to its predecessor's time and reported in `out_of_order`, so shares never go negative.
    Duplicate stages keep their first occurrence.
    """
    first: dict[str, Event] = {}
    for event in events:
        if event.stage not in STAGE_ORDER:
            raise ValueError(f"unknown stage {event.stage!r}; expected one of {STAGE_ORDER}")
        if event.stage not in first or event.at < first[event.stage].at:
            first[event.stage] = event
    if "desired_set" not in first:
        raise ValueError("the timeline has no desired_set stage: the clock never started")
    start = first["desired_set"].at
    ordered = [first[s] for s in STAGE_ORDER if s in first]
    out_of_order: list[str] = []
    times: list[datetime] = []
    for event in ordered:
        at = event.at
        if times and at < times[-1]:
            out_of_order.append(event.stage)
            at = times[-1]
        times.append(at)
    end = times[-1]
    span = max(0.0, (end - start).total_seconds())
    stages: list[Stage] = []
    best: tuple[float, str | None] = (-1.0, None)
    for index, (event, at) in enumerate(zip(ordered, times, strict=True)):
        elapsed = (at - start).total_seconds()
        share = None
        if index and at >= start and times[index - 1] >= start:
            step = (at - times[index - 1]).total_seconds()
            share = step / span if span > 0 else 0.0
            if step > best[0]:
                best = (step, event.stage)
        stages.append(
            Stage(
                stage=event.stage,
                at=iso(event.at),
                bounded=event.bounded,
                source=event.source,
                elapsed_s=round(elapsed, 3),
                share=None if share is None else round(share, 4),
            )
        )
    missing = [s for s in expected if s not in first]
    return Timeline(stages, span, best[1], missing, out_of_order)


def probe_rung(qmax: QmaxArtifact) -> tuple[int, int]:
    """(probe concurrency, post-scale concurrency per instance) chosen from the artifact.

    The probe must run at a measured rung whose half was measured too, so recovery can be
    judged against a measured p95. 10 and 5 when measured (the published method's choice), else the
    largest such pair within Q_max, else the smallest pair at all.
    """
    usable = {r.concurrency: r for r in qmax.rungs if r.usable and r.ttfab_ms.p95 is not None}
    pairs = sorted(c for c in usable if c % 2 == 0 and c // 2 in usable)
    if not pairs:
        raise InputError(
            "the qmax artifact has no usable rung whose half is also usable (e.g. 10 and 5); "
            "expected a ladder such as 1,2 or 1,5,10 measured first"
        )
    if 10 in pairs:
        return 10, 5
    within = [c for c in pairs if qmax.q_max is not None and c <= qmax.q_max]
    chosen = within[-1] if within else pairs[0]
    return chosen, chosen // 2


def recovery_threshold_ms(qmax: QmaxArtifact, post_scale: int) -> float:
    rung = next(r for r in qmax.rungs if r.concurrency == post_scale and r.usable)
    assert rung.ttfab_ms.p95 is not None
    return RECOVERY_FACTOR * rung.ttfab_ms.p95


def recovered_at_ns(
    records: Sequence[RequestRecord], *, after_ns: int, window_s: float, threshold_ms: float
) -> int | None:
    """Start of the first window (stepping one request at a time) after `after_ns` whose probe
    p95 TTFAB is within the threshold; None when no complete window recovered."""
    window_ns = int(window_s * 1e9)
    done = sorted(
        (
            r
            for r in records
            if r.status == "ok" and r.ttfab_ms is not None and r.start_ns >= after_ns
        ),
        key=lambda r: r.start_ns,
    )
    if not done:
        return None
    last_start = done[-1].start_ns
    for index, first in enumerate(done):
        if first.start_ns + window_ns > last_start:
            return None
        window = [
            r.ttfab_ms
            for r in done[index:]
            if r.ttfab_ms is not None and r.start_ns < first.start_ns + window_ns
        ]
        if float(np.percentile(window, 95)) <= threshold_ms:
            return first.start_ns
    return None
