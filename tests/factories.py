"""Small artifact pieces for unit tests of the pure core."""

from __future__ import annotations

from pytest_tts_scaling.schema import Rung
from pytest_tts_scaling.stats import summarize


def make_rung(concurrency: int, *, meets_slo: bool = True, ttfab_p95_ms: float = 1.0) -> Rung:
    """A usable rung with one request whose TTFAB and latency are `ttfab_p95_ms`."""
    one = summarize([ttfab_p95_ms])
    return Rung(
        concurrency=concurrency,
        usable=True,
        unusable_reason=None,
        meets_slo=meets_slo,
        completed=1,
        rejected=0,
        measure_s=1,
        throughput_rps=1,
        concurrency_mean=concurrency,
        ttfab_ms=one,
        latency_ms=one,
    )
