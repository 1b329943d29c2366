"""Small artifact pieces for unit tests of the pure core: one place to build them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_tts_scaling.core.schema import QmaxArtifact, Rung
from pytest_tts_scaling.core.stats import summarize


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


def make_qmax(rungs: Sequence[Rung] = (), q_max: int | None = None, **fields: Any) -> QmaxArtifact:
    """A qmax artifact of a local run with these rungs; `fields` replace any top-level field."""
    made = QmaxArtifact.model_validate(
        {
            "model": "kokoro-82m",
            "endpoint": "local",
            "transport": "response-stream",
            "slug": "local-12345678",
            "deployed_config": {"instance_type": "local", "image_digest": "sha256:1234"},
            "slo_ms": 3000,
            "q_max": q_max,
            "q_max_bracketed": q_max is not None,
            "s_mean_s": None,
            "s_p95_s": None,
            "ttfab_p95_at_c1_ms": None,
            "frozen": True,
            "unbounded_queue": True,
            "rungs": list(rungs),
            "provenance": {
                "origin": "test",
                "run_id": "r",
                "measured_at": "2026-01-01T00:00:00Z",
                "tool_version": "0",
            },
        }
    )
    return made.model_copy(update=fields)
