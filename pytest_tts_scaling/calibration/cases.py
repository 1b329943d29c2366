"""The calibration matrix: reference servers, each with the SLO it is measured at and its truth.

SLOs sit halfway between the p95 TTFAB of Q_max and of Q_max + 1 (see `truth.slo_margin_ms`),
so a verdict is decided by the server's capacity, not by scheduling jitter. Cases marked `fast`
finish their measurement in seconds and run in the project's tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from pytest_tts_scaling.calibration.disciplines import (
    Batching,
    Discipline,
    Faults,
    RandomSlots,
    Slots,
)
from pytest_tts_scaling.calibration.server import SerialStreamServer
from pytest_tts_scaling.calibration.truth import (
    Truth,
    clock_offsets_s,
    hang_up_point_s,
    hang_up_qmax,
    truth_for,
)
from pytest_tts_scaling.core.audio import AUDIO_SHORT
from pytest_tts_scaling.core.confirm import change_words
from pytest_tts_scaling.core.records import HangUp
from pytest_tts_scaling.core.schema import QmaxArtifact, Rung, SloMetric, Summary

# The base of the fault cases: serial, 50 ms a request, first audio at 20 ms; Q_max 6 at 295 ms.
FAST_SERIAL = Slots(slots=1, service_s=0.05, first_audio_s=0.02)
FAST_SLO_MS = 295.0
# Room for 300 ms of silence before the speech: 400 ms a request, first audio at 20 ms; Q_max 3
# at 1020 ms (p95 TTFAB 820 ms at 3, 1220 at 4).
LEAD_SERIAL = Slots(slots=1, service_s=0.4, first_audio_s=0.02)
# A rung's audible p50 is its TTFAB p50 plus the lead, within this (the client's own lateness).
AUDIBLE_TOLERANCE_MS = 20.0
# A cold first answer's TTFAB is its wait plus the service's first audio, and the client's and
# the loop's lateness on a busy host: within this of the wait.
COLD_TOLERANCE_MS = 1000.0
# A stall after the first piece of speech: 400 ms a request, the first of 4 pieces of 25 ms of
# audio at 20 ms, the rest at 320 ms; glitch-free playback at 295 ms, so on the playback clock
# Q_max is 2 at 895 ms (p95 695 ms at 2, 1095 at 3), on TTFAB's it would be 3.
STALL = Faults(stall_after_first_s=0.3)
# The key the OpenAI-style cases require; the shipped scenarios read it from OPENAI_API_KEY.
CALIBRATION_KEY = "calibration-key"
# Hang-ups: 400 ms answers of 4 pieces of 100 ms audio; a listener who hangs up after 200 ms of
# audio closes each at its second piece, 147 ms in. A server that frees the slot serves
# every-request hang-ups in 147 ms (Q_max 5 at 680 ms, where answers heard whole give 2); one
# that computes the abandoned answers keeps 400 ms a request and the worker waits behind its own
# (half the requests hung up: Q_max 2 at 873 ms, where answers heard whole give 3).
HANG_UP_SERIAL = Slots(slots=1, service_s=0.4, first_audio_s=0.02)


@dataclass(frozen=True)
class Case:
    name: str
    discipline: Discipline
    slo_ms: float
    faults: Faults = field(default_factory=Faults)
    fast: bool = False
    # Answers carry a tone with a silent tail, so the audio checks have speech to judge.
    tone: bool = False
    # The server's face and body, and the shipped scenario that measures it (None: the
    # container's contract, POST /invocations with raw audio).
    face: Literal["invocations", "openai"] = "invocations"
    body_format: Literal["raw", "sse"] = "raw"
    scenario: str | None = None
    # The clock its SLO holds (--slo-metric).
    slo_metric: SloMetric = "ttfab"
    # The client hangs up on a share of the requests; the server frees a hung-up answer's slot
    # at once, or computes it to its end.
    hang_up: HangUp | None = None
    frees_abandoned: bool = False

    def clock_discipline(self) -> Discipline:
        """The discipline as the SLO's clock sees it: a slots server whose first audio comes at
        that clock's offset (truth.clock_offsets_s); the discipline itself for TTFAB."""
        if self.slo_metric == "ttfab" or not isinstance(self.discipline, Slots):
            return self.discipline
        offset = self.clock_offsets_s()[self.slo_metric]
        return replace(self.discipline, first_audio_s=offset)

    def clock_offsets_s(self) -> dict[str, float]:
        assert isinstance(self.discipline, Slots)
        # Every answer carries the server's nominal audio, whatever the discipline's service time.
        server = SerialStreamServer
        return clock_offsets_s(self.discipline, self.faults, server.chunks, server.service_s)

    def truth(self) -> Truth:
        """The answer a correct qmax gives; faults that leave capacity alone keep its truth."""
        if self.hang_up is not None:
            return self._hang_up_truth(self.hang_up)
        faults = self.faults
        if faults.slow_from_in_flight:
            return Truth(q_max=None, bracketed=False, source="fault", server_changed=True)
        if faults.stall_after_headers or faults.stop_after is not None:
            return Truth(q_max=None, bracketed=False, source="fault", endpoint_error=True)
        if faults.error_every and faults.error_every < 100:
            return Truth(q_max=None, bracketed=False, source="fault", failing_reason="errors")
        truth = truth_for(self.clock_discipline(), self.slo_ms)
        cap = faults.truncate_above
        if cap and (truth.q_max is None or truth.q_max > cap):
            truth = Truth(q_max=cap, bracketed=True, source="truncation", error_kind=AUDIO_SHORT)
        if faults.lead_silence_s or faults.stall_after_first_s:
            offsets = self.clock_offsets_s()
            audible_ms = 1000 * (offsets["audible"] - offsets["ttfab"])
            truth = replace(
                truth,
                # (only a tone has speech to hear; zeros are silence throughout)
                audible_after_ttfab_ms=audible_ms if self.tone else None,
                glitch_free_after_ttfab_ms=1000 * (offsets["playback"] - offsets["ttfab"]),
            )
        if faults.cold_first_s:
            truth = replace(truth, cold_first_ms=faults.cold_first_s * 1000)
        return truth

    def _hang_up_truth(self, hang_up: HangUp) -> Truth:
        """The closed form holds for one slot, every request hung up on a freeing server, and
        a share well above the p95's 5% on one that keeps computing (truth.hang_up_qmax)."""
        slots = self.discipline
        share_ok = hang_up.fraction == 1 if self.frees_abandoned else hang_up.fraction >= 0.2
        if type(slots) is not Slots or slots.slots != 1 or not share_ok:
            raise ValueError(f"case {self.name}: no closed form for this hang-up")
        point_s = hang_up_point_s(slots, SerialStreamServer.chunks, hang_up.after_audio_s)
        q_max = hang_up_qmax(slots, point_s, frees=self.frees_abandoned, slo_ms=self.slo_ms)
        return Truth(q_max=q_max, bracketed=True, source="closed form", hangs_up=True)

    def server(self) -> SerialStreamServer:
        openai = self.face == "openai"
        audio_s = SerialStreamServer.service_s
        if self.hang_up is not None and isinstance(self.discipline, Slots):
            audio_s = self.discipline.service_s  # as much audio as the slot's service time
        return SerialStreamServer(
            service_s=audio_s,
            discipline=self.discipline,
            faults=self.faults,
            face=self.face,
            body_format=self.body_format,
            api_key=CALIBRATION_KEY if openai else None,
            tone=self.tone,
            frees_abandoned=self.frees_abandoned,
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
    Case("truncating", FAST_SERIAL, FAST_SLO_MS, Faults(truncate_above=3), fast=True, tone=True),
    Case("lead-silence", LEAD_SERIAL, 1020.0, Faults(lead_silence_s=0.3), tone=True),
    # The silence in one piece with the speech (Kokoro's own answers): it arrives with the first
    # byte and is heard 300 ms later, so on the audible clock Q_max is 3 at 1320 ms (p95 1120 ms
    # at 3, 1520 at 4; on TTFAB's it would be 4).
    Case(
        "lead-in-one-piece",
        LEAD_SERIAL,
        1320.0,
        Faults(lead_silence_s=0.3, lead_silence_joined=True),
        tone=True,
        slo_metric="audible",
    ),
    Case("stall-after-first", LEAD_SERIAL, 895.0, STALL, slo_metric="playback"),
    # Twice as slow once 7 requests were first in flight (the rung above Q_max 6): the pair
    # (6 passes, 7 fails) comes from two servers, which the confirmation of 6 must name.
    Case("slowing", FAST_SERIAL, FAST_SLO_MS, Faults(slow_from_in_flight=7, slow_factor=2.0)),
    # A first answer after 25 s (weights loaded on first use), /ping answering meanwhile.
    Case("cold-start", FAST_SERIAL, FAST_SLO_MS, Faults(cold_first_s=25.0)),
    Case("openai-raw", FAST_SERIAL, FAST_SLO_MS, face="openai", scenario="openai-speech"),
    Case(
        "openai-sse",
        FAST_SERIAL,
        FAST_SLO_MS,
        face="openai",
        body_format="sse",
        scenario="openai-speech-sse",
    ),
    Case(
        "hang-up-frees",
        HANG_UP_SERIAL,
        680.0,
        hang_up=HangUp(fraction=1.0, after_audio_s=0.2),
        frees_abandoned=True,
    ),
    Case("hang-up-keeps", HANG_UP_SERIAL, 873.0, hang_up=HangUp(fraction=0.5, after_audio_s=0.2)),
)
BY_NAME = {case.name: case for case in CASES}


@dataclass(frozen=True)
class Outcome:
    """What one measurement gave, in the words of the truth table."""

    q_max: int | None
    bracketed: bool
    error: str | None = None
    rung_reasons: tuple[str | None, ...] = ()
    # The error kinds of the rungs that failed for errors.
    error_kinds: frozenset[str] = frozenset()
    # Per rung with the listener's clocks: its p50 minus its TTFAB p50 (ms), for the first
    # audible speech as played and for glitch-free playback.
    audible_leads_ms: tuple[float, ...] = ()
    glitch_free_leads_ms: tuple[float, ...] = ()
    # Requests the client hung up on, over every rung.
    hung_up: int = 0
    # The confirmation's outcome (`held`, `changed`, ...; None: none measured), and the change
    # it found (`N=6 p95 270 → 520 ms`) where it voided the answer.
    confirmed: str | None = None
    change: str | None = None
    # The health probe's first answer's TTFAB, where it was asked for again (a cold start).
    cold_first_ms: float | None = None

    @classmethod
    def of(cls, artifact: QmaxArtifact) -> Outcome:
        rungs = artifact.rungs
        confirmation = artifact.confirmation
        return cls(
            q_max=artifact.q_max,
            bracketed=artifact.q_max_bracketed,
            rung_reasons=tuple(rung_reason(r) for r in rungs),
            error_kinds=frozenset(
                kind for r in rungs if r.fail_reason == "errors" for kind in r.errors_by_kind
            ),
            audible_leads_ms=_leads(rungs, lambda r: r.speech_ms),
            glitch_free_leads_ms=_leads(rungs, lambda r: r.glitch_free_ms),
            hung_up=sum(r.hung_up for r in rungs),
            confirmed=None if confirmation is None else confirmation.outcome,
            change=change_words(confirmation)
            if confirmation is not None and confirmation.outcome == "changed"
            else None,
            cold_first_ms=_number(artifact.probe.get("cold_ttfab_ms")),
        )

    def text(self) -> str:
        if self.error is not None:
            return "error"
        suffix = f" cold {self.cold_first_ms / 1000:.1f} s" if self.cold_first_ms else ""
        if self.confirmed not in (None, "held"):
            suffix += f" [{self.confirmed}]"
        if self.change is not None:
            return f"changed: {self.change}"
        if self.q_max is None:
            reasons = sorted({r or "slo" for r in self.rung_reasons})
            return f"none ({'/'.join(reasons)})"
        words = [str(self.q_max)]
        if self.error_kinds:
            words.append(f"({'/'.join(sorted(self.error_kinds))})")
        for name, leads in (
            ("audible", self.audible_leads_ms),
            ("glitch-free", self.glitch_free_leads_ms),
        ):
            if leads:
                words.append(f"{name} +{min(leads):.0f}..{max(leads):.0f} ms")
        if self.hung_up:
            words.append(f"({self.hung_up} hung up)")
        return " ".join(words) + suffix

    def matches(self, truth: Truth) -> bool:
        if truth.endpoint_error:
            return self.error is not None
        if truth.server_changed or self.change is not None:
            return truth.server_changed and self.error is None and self.change is not None
        if truth.cold_first_ms is not None and not (
            self.cold_first_ms is not None
            and 0 <= self.cold_first_ms - truth.cold_first_ms <= COLD_TOLERANCE_MS
        ):
            return False
        if self.error is not None or self.q_max != truth.q_max:
            return False
        if truth.failing_reason is not None:
            return bool(self.rung_reasons) and all(
                r == truth.failing_reason for r in self.rung_reasons
            )
        if truth.error_kind is not None and truth.error_kind not in self.error_kinds:
            return False
        if truth.hangs_up != (self.hung_up > 0):
            return False
        for expected, leads in (
            (truth.audible_after_ttfab_ms, self.audible_leads_ms),
            (truth.glitch_free_after_ttfab_ms, self.glitch_free_leads_ms),
        ):
            if expected is not None and not (
                leads and all(abs(lead - expected) <= AUDIBLE_TOLERANCE_MS for lead in leads)
            ):
                return False
        return self.bracketed == truth.bracketed


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _leads(rungs: list[Rung], clock: Callable[[Rung], Summary | None]) -> tuple[float, ...]:
    """Per rung with a p50 on the clock: that p50 minus its TTFAB p50 (ms)."""
    leads = []
    for rung in rungs:
        summary = clock(rung)
        if summary is not None and summary.p50 is not None and rung.ttfab_ms.p50 is not None:
            leads.append(summary.p50 - rung.ttfab_ms.p50)
    return tuple(leads)


def rung_reason(rung: Rung) -> str | None:
    """Why a rung did not pass: `slo` or `errors` when usable, else why it is unusable."""
    return rung.fail_reason or rung.unusable_reason
