"""The calibration matrix: reference servers, each with the SLO it is measured at and its truth.

SLOs sit halfway between the p95 TTFAB of Q_max and of Q_max + 1 (see `truth.slo_margin_ms`),
so a verdict is decided by the server's capacity, not by scheduling jitter. Cases marked `fast`
finish their measurement in seconds and run in the project's tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pytest_tts_scaling.calibration.disciplines import (
    Batching,
    Discipline,
    Faults,
    RandomSlots,
    Slots,
)
from pytest_tts_scaling.calibration.server import SerialStreamServer
from pytest_tts_scaling.calibration.truth import Truth, truth_for
from pytest_tts_scaling.core.schema import QmaxArtifact, Rung

# The base of the fault cases: serial, 50 ms a request, first audio at 20 ms; Q_max 6 at 295 ms.
FAST_SERIAL = Slots(slots=1, service_s=0.05, first_audio_s=0.02)
FAST_SLO_MS = 295.0
# The key the OpenAI-style cases require; the shipped scenarios read it from OPENAI_API_KEY.
CALIBRATION_KEY = "calibration-key"


@dataclass(frozen=True)
class Case:
    name: str
    discipline: Discipline
    slo_ms: float
    faults: Faults = field(default_factory=Faults)
    fast: bool = False
    # The server's face and body, and the shipped scenario that measures it (None: the
    # container's contract, POST /invocations with raw audio).
    face: Literal["invocations", "openai"] = "invocations"
    body_format: Literal["raw", "sse"] = "raw"
    scenario: str | None = None

    def truth(self) -> Truth:
        """The answer a correct qmax gives; faults that leave capacity alone keep its truth."""
        if self.faults.stall_after_headers or self.faults.stop_after is not None:
            return Truth(q_max=None, bracketed=False, source="fault", endpoint_error=True)
        if self.faults.error_every and self.faults.error_every < 100:
            return Truth(q_max=None, bracketed=False, source="fault", failing_reason="errors")
        return truth_for(self.discipline, self.slo_ms)

    def server(self) -> SerialStreamServer:
        openai = self.face == "openai"
        return SerialStreamServer(
            discipline=self.discipline,
            faults=self.faults,
            face=self.face,
            body_format=self.body_format,
            api_key=CALIBRATION_KEY if openai else None,
        )


CASES: tuple[Case, ...] = (
    Case("serial", Slots(1, service_s=0.1, first_audio_s=0.05), slo_ms=1000.0),
    Case("serial-fast", FAST_SERIAL, FAST_SLO_MS, fast=True),
    Case("4-slot", Slots(4, service_s=0.2, first_audio_s=0.05), slo_ms=750.0),
    Case("2-slot-fast", Slots(2, service_s=0.1, first_audio_s=0.03), slo_ms=280.0, fast=True),
    Case("batching", Batching(0.04, 0.06, max_batch=16, window_s=0.04), slo_ms=830.0),
    Case("batching-full", Batching(0.05, 0.01, max_batch=8, window_s=0.03), slo_ms=400.0),
    Case("random", RandomSlots(1, 0.1, 0.03, spread=0.15, seed=7), slo_ms=1008.0),
    Case("gated", FAST_SERIAL, FAST_SLO_MS, Faults(max_queue_depth=7), fast=True),
    Case("erroring", FAST_SERIAL, FAST_SLO_MS, Faults(error_every=10), fast=True),
    Case("wav", FAST_SERIAL, FAST_SLO_MS, Faults(wav_header=True)),
    Case("slow-ping", FAST_SERIAL, FAST_SLO_MS, Faults(ping_delay_s=1.5)),
    Case("stalling", FAST_SERIAL, FAST_SLO_MS, Faults(stall_after_headers=True)),
    Case("stops", FAST_SERIAL, FAST_SLO_MS, Faults(stop_after=150)),
    # Each answer whole, after all its compute (as Kokoro-FastAPI sends an utterance): slow, not
    # stalled. The slow one is silent longer than the stall bound its SLO alone gives.
    Case("one-burst", Slots(1, service_s=0.05, first_audio_s=0.05), slo_ms=275.0, fast=True),
    Case("one-burst-slow", Slots(1, service_s=6.0, first_audio_s=6.0), slo_ms=2000.0),
    Case("openai-raw", FAST_SERIAL, FAST_SLO_MS, face="openai", scenario="openai-speech"),
    Case(
        "openai-sse",
        FAST_SERIAL,
        FAST_SLO_MS,
        face="openai",
        body_format="sse",
        scenario="openai-speech-sse",
    ),
)
BY_NAME = {case.name: case for case in CASES}


@dataclass(frozen=True)
class Outcome:
    """What one measurement gave, in the words of the truth table."""

    q_max: int | None
    bracketed: bool
    error: str | None = None
    rung_reasons: tuple[str | None, ...] = ()

    @classmethod
    def of(cls, artifact: QmaxArtifact) -> Outcome:
        return cls(
            q_max=artifact.q_max,
            bracketed=artifact.q_max_bracketed,
            rung_reasons=tuple(rung_reason(r) for r in artifact.rungs),
        )

    def text(self) -> str:
        if self.error is not None:
            return "error"
        if self.q_max is None:
            reasons = sorted({r or "slo" for r in self.rung_reasons})
            return f"none ({'/'.join(reasons)})"
        return str(self.q_max)

    def matches(self, truth: Truth) -> bool:
        if truth.endpoint_error:
            return self.error is not None
        if self.error is not None or self.q_max != truth.q_max:
            return False
        if truth.failing_reason is not None:
            return bool(self.rung_reasons) and all(
                r == truth.failing_reason for r in self.rung_reasons
            )
        return self.bracketed == truth.bracketed


def rung_reason(rung: Rung) -> str | None:
    """Why a rung did not pass: `slo` or `errors` when usable, else why it is unusable."""
    return rung.fail_reason or rung.unusable_reason
