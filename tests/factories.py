"""What the tests build (RequestRecord, Rung, QmaxArtifact, PlanArtifact, a step's inputs): one
place to build it.

Each factory fills every required field with a plain value and takes any field as a keyword
(the artifacts' validated by the schema), so a test names only what it is about.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_tts_scaling.core.decoding import ResponseFormat
from pytest_tts_scaling.core.records import AudioFormat, RequestRecord, StreamTimer
from pytest_tts_scaling.core.schema import Finding, PlanArtifact, QmaxArtifact, Rung
from pytest_tts_scaling.core.spelling import pytest_flag
from pytest_tts_scaling.core.stats import summarize
from pytest_tts_scaling.option_table import OPTION_SPECS
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs

MODEL = "kokoro-82m"
# The measured example artifacts the report and the rules are checked against.
EXAMPLES = Path(__file__).resolve().parents[1] / "reports" / "examples" / "source"
QMAX_EXAMPLE = EXAMPLES / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
# The shortest rungs a local server still answers a verdict in (pytest spelling).
QUICK_RUNGS = ("--tts-hold-s", "1.5", "--tts-measure-s", "1", "--tts-gap-s", "0")


def make_record(
    start_ns: int = 0, *, ttfab_ms: float | None = 100.0, **fields: Any
) -> RequestRecord:
    """One request of rung 1 that started at `start_ns` and ended 1 ns later, with no audio."""
    values: dict[str, Any] = {
        "request_id": str(start_ns),
        "rung": 1,
        "worker": 0,
        "start_ns": start_ns,
        "end_ns": start_ns + 1,
        "status": "ok",
        "error_code": None,
        "http_status": 200,
        "ttfab_ms": ttfab_ms,
        "latency_ms": 1.0,
        "audio_bytes": 0,
        "audio_s": 0.0,
        "underrun_ms": None,
        "gaps_ms": (),
        "voice": None,
        "text_chars": 0,
        "epoch_start_ns": 0,
    }
    return RequestRecord(**{**values, **fields})


def make_rung(
    concurrency: int, *, meets_slo: bool = True, ttfab_p95_ms: float = 1.0, **fields: Any
) -> Rung:
    """A usable rung with one request whose TTFAB and latency are `ttfab_p95_ms`."""
    one = summarize([ttfab_p95_ms])
    values: dict[str, Any] = {
        "concurrency": concurrency,
        "usable": True,
        "unusable_reason": None,
        "meets_slo": meets_slo,
        "completed": 1,
        "rejected": 0,
        "measure_s": 1,
        "throughput_rps": 1,
        "concurrency_mean": concurrency,
        "ttfab_ms": one,
        "latency_ms": one,
    }
    return Rung.model_validate({**values, **fields})


def make_qmax(rungs: Sequence[Rung] = (), q_max: int | None = None, **fields: Any) -> QmaxArtifact:
    """A qmax artifact of a local run with these rungs; `fields` replace any top-level field."""
    values: dict[str, Any] = {
        "model": MODEL,
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
    return QmaxArtifact.model_validate({**values, **fields})


def make_plan(**fields: Any) -> PlanArtifact:
    """The source's worked example (docs/steps.md#plan) with a warn verdict, as `tts-bench plan`
    writes it."""
    values: dict[str, Any] = {
        "model": MODEL,
        "slug": "g5xlarge-8b1b96bc",
        "inputs": {"slo_ms": 3000, "surge_ratio": 1.25, "peak_rps": 5000, "trough_rps": 10},
        "c_scale_max": 37.5,
        "c_scale_min": 25.0,
        "cw_units_ratio": 1.0,
        "scaling_target_value": 37.5,
        "scale_in_threshold": 25.0,
        "w_max_s": 2.934,
        "queue_max_depth": 50,
        "scale_out_cooldown_s": 30,
        "scale_in_cooldown_s": 960,
        "min_instances": 1,
        "max_instances": 29,
        "min_safe_instances": 3,
        "per_instance_rps_at_c_scale_max": 172.4,
        "first_chunk_alarm_ms": 65.0,
        "findings": [
            Finding(name="surge_survival", verdict="warn", detail="97.4%", recommendation="-"),
            Finding(name="scale_in_safety", verdict="warn", detail="floor 1", recommendation="3"),
        ],
        "verdict": "warn",
        "config_block": f'"{MODEL}": ModelEndpointConfig(...)',
    }
    return PlanArtifact.model_validate({**values, **fields})


def pytest_args(*args: str) -> tuple[str, ...]:
    """tts-bench's words as pytest spells them: `--ladder 1,2` → `--tts-ladder=1,2` (with '=',
    which keeps a path value from being read as where the tests are)."""
    valued = {spec.flag for spec in OPTION_SPECS if spec.takes_value}
    switches = {spec.flag for spec in OPTION_SPECS if not spec.takes_value}
    out: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg in valued:
            out.append(f"{pytest_flag(arg)}={next(rest)}")
        else:
            out.append(pytest_flag(arg) if arg in switches else arg)
    return tuple(out)


def timed(response: ResponseFormat, pieces: list[bytes]) -> StreamTimer:
    """A response's body fed piece by piece to a timer whose clock ticks 1 ms a reading."""
    ticks = iter(range(0, 10**12, 1_000_000))
    timer = StreamTimer(AudioFormat(), decoder=response.decoder(), clock_ns=lambda: next(ticks))
    timer.started()
    for piece in pieces:
        timer.body(piece)
    timer.finished("ok")
    return timer


def qmax_inputs(**options: Any) -> QmaxInputs:
    """The qmax step's inputs from these option fields, as both doors build them."""
    return QmaxInputs.from_options(RunOptions(**options))


def ttotal_inputs(**options: Any) -> TtotalInputs:
    """The ttotal step's inputs from these option fields, as both doors build them."""
    return TtotalInputs.from_options(RunOptions(**options))
