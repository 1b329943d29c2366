"""What a load run achieved, from its records. Pure: rows in, a summary out.

TTFAB, latency and in-flight come from the same pure core as the ladder (`stats`). For an open
loop it also says how the sends kept to the schedule: the achieved against the requested rate,
the inter-arrival coefficient of variation (0 constant, about 1 Poisson), and each send's lag
behind its scheduled time, with the late ones counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_tts_scaling.core.arrivals import LATE_TOLERANCE_MS, achieved
from pytest_tts_scaling.core.schema import Summary
from pytest_tts_scaling.core.stats import summarize, time_weighted_in_flight


@dataclass(frozen=True)
class LoadSummary:
    mode: str
    processes: int
    sent: int
    statuses: dict[str, int]
    span_s: float
    requested_rps: float | None
    scheduled_rps: float | None
    achieved_rps: float
    inter_arrival_cv: float | None
    send_lag_ms: Summary | None
    late: int
    unsent: int
    abandoned: int
    ttfab_ms: Summary
    latency_ms: Summary
    in_flight_mean: float
    in_flight_max: float

    def rate_error(self) -> float | None:
        """Achieved over requested rate, minus one (open loop only). For Poisson arrivals this
        includes the schedule's own sampling noise; against `scheduled_rps` it does not."""
        if not self.requested_rps:
            return None
        return self.achieved_rps / self.requested_rps - 1.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            key: value.model_dump() if isinstance(value, Summary) else value
            for key, value in self.__dict__.items()
        }
        out["rate_error"] = self.rate_error()
        return out

    def lines(self) -> list[str]:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        out = [
            f"load: {self.sent} requests over {self.span_s:.1f} s in {self.processes} "
            f"process(es) ({counts})",
            f"load: TTFAB ms {_dist(self.ttfab_ms)}; latency ms {_dist(self.latency_ms)}",
            f"load: in flight mean {self.in_flight_mean:.1f}, max {self.in_flight_max:.0f}",
        ]
        if self.mode == "open":
            rate = f"load: achieved {self.achieved_rps:.2f} rps"
            if self.scheduled_rps:
                rate += f" of {self.scheduled_rps:.2f} scheduled"
            if self.requested_rps:
                rate += f", {self.requested_rps:.2f} requested ({self.rate_error():+.2%})"
            if self.inter_arrival_cv is not None:
                rate += f", inter-arrival CV {self.inter_arrival_cv:.3f}"
            out.append(rate)
            lag = self.send_lag_ms
            out.append(
                f"load: send lag ms {_dist(lag) if lag else 'n/a'}; {self.late} sent late "
                f"(> {LATE_TOLERANCE_MS:g} ms behind schedule), {self.unsent} not sent"
            )
        if self.abandoned:
            out.append(f"load: {self.abandoned} requests still running at the end were abandoned")
        return out


def _dist(s: Summary) -> str:
    if not s.count:
        return "n/a"
    return f"p50 {s.p50:.1f} p95 {s.p95:.1f} p99 {s.p99:.1f} max {s.max:.1f} (n={s.count})"


def summarize_load(
    rows: Sequence[dict[str, Any]],
    *,
    mode: str,
    processes: int,
    requested_rps: float | None = None,
    scheduled_rps: float | None = None,
    unsent: int = 0,
    abandoned: int = 0,
) -> LoadSummary:
    starts = [int(r["epoch_start_ns"]) for r in rows]
    ends = [int(r["epoch_start_ns"]) + int(r["latency_ms"] * 1e6) for r in rows]
    span = (max(starts) - min(starts)) / 1e9 if len(starts) > 1 else 0.0
    ok = [r for r in rows if r["status"] == "ok"]
    ttfab = [float(r["ttfab_ms"]) for r in ok if r["ttfab_ms"] is not None]
    lags = [float(r["send_lag_ms"]) for r in rows if r.get("send_lag_ms") is not None]
    rate, cv = achieved(starts)
    mean, peak = (0.0, 0.0)
    if rows:
        mean, peak = time_weighted_in_flight(
            list(zip(starts, ends, strict=True)), min(starts), max(ends)
        )
    return LoadSummary(
        mode=mode,
        processes=processes,
        sent=len(rows),
        statuses=dict(Counter(str(r["status"]) for r in rows)),
        span_s=span,
        requested_rps=requested_rps,
        scheduled_rps=scheduled_rps,
        achieved_rps=rate if mode == "open" else (len(rows) / span if span else 0.0),
        inter_arrival_cv=cv if mode == "open" else None,
        send_lag_ms=summarize(lags) if lags else None,
        late=sum(1 for lag in lags if lag > LATE_TOLERANCE_MS),
        unsent=unsent,
        abandoned=abandoned,
        ttfab_ms=summarize(ttfab),
        latency_ms=summarize([float(r["latency_ms"]) for r in ok]),
        in_flight_mean=mean,
        in_flight_max=peak,
    )
