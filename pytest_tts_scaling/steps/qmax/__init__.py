"""The qmax measurement: search (or climb the given ladder), judge each rung, keep the artifact.

The artifact is rewritten atomically after every rung (marked incomplete until the end), so an
interrupted run keeps everything it measured. Per-request records go to a JSONL file beside it.
One rung is measured in steps/qmax/rung.py; what the run says, in steps/qmax/words.py.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NoReturn

from pytest_tts_scaling import __version__
from pytest_tts_scaling.artifacts import keep_previous, kept_lines, save
from pytest_tts_scaling.core.audio import AudioReference
from pytest_tts_scaling.core.confirm import confirmation_concurrency, judge_confirmation
from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.core.records import RequestSpec
from pytest_tts_scaling.core.schema import (
    CLOCK_WORDS,
    Confirmation,
    Provenance,
    QmaxArtifact,
    Rung,
    SloTier,
    qmax_filename,
)
from pytest_tts_scaling.core.search import Step, add_measurement, next_step, rungs_left
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.core.verdicts import (
    at_slo,
    falls_in_p95,
    inconclusive_rungs,
    select_qmax,
    verdict_words,
)
from pytest_tts_scaling.endpoints.base import Endpoint
from pytest_tts_scaling.errors import EndpointUnavailable, InputError
from pytest_tts_scaling.load.engine import silence_kept_s, stall_bound_s
from pytest_tts_scaling.load.workload import Workload
from pytest_tts_scaling.steps.qmax.health import (
    cold_start_line,
    first_answer_line,
    require_answer,
    silence_after,
)
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from pytest_tts_scaling.steps.qmax.quality import QualityCheck
from pytest_tts_scaling.steps.qmax.rung import (
    PROGRESS_EVERY_S,
    iso_ns,
    measure_rung,
    mmss,
)
from pytest_tts_scaling.steps.qmax.words import (
    again_line,
    client_saturation_lines,
    progress_line,
    tier_words,
    trust_lines,
)

# The health probe after a rung that heard no audio waits longer than a rung's stall bound for
# an answer: a slow endpoint on a busy host is not a dead one (refusals and error statuses are
# still seen at once). The first probe waits the endpoint's invocation limit.
PROBE_PATIENCE_S = 20.0


@dataclass(frozen=True)
class LadderResult:
    artifact: QmaxArtifact
    path: Path
    records_path: Path

    def summary_lines(self) -> list[str]:
        a = self.artifact
        lines = [
            f"qmax: {verdict_words(a)} for {a.model} over {a.transport} on {a.slug} "
            f"at p95 {CLOCK_WORDS[a.slo_metric]} <= {a.slo_ms:g} ms",
            f"qmax: artifact {self.path}",
            f"qmax: per-request records {self.records_path}",
        ]
        if a.deployed_config.synthetic_engine:
            lines.append("qmax: measured on the SYNTHETIC engine (a cost model; no model ran)")
        elif a.deployed_config.development_model:
            lines.append("qmax: measured on the untrained development model (real architecture)")
        elif a.deployed_config.weights is not None:
            lines.append(f"qmax: measured on Kokoro-82M, weights {a.deployed_config.weights}")
        if (
            cold := cold_start_line(a.probe.get("cold_ttfab_ms"), a.probe.get("ttfab_ms"))
        ) is not None:
            lines.append(cold)
        for tier in a.slo_tiers:
            lines.append(f"qmax: {tier_words(a, tier)}")
        if a.admission_bound is not None:
            lines.append(f"qmax: admission bound {a.admission_bound} ({a.admission_bound_source})")
        lines.extend(client_saturation_lines(a.rungs))
        lines.extend(trust_lines(a))
        return lines


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def check_admission_bound(endpoint: Endpoint, top_rung: int | None, allow: bool) -> None:
    """Refuse a ladder that climbs above the container's admission bound, whether it was
    deployed (QUEUE_MAX_DEPTH) or named by the endpoint's own 503 answers. The search (no
    ladder, `top_rung` None) is not refused: it stops below the bound (:func:`search_top`)."""
    bound = endpoint.queue_max_depth
    if top_rung is not None and bound is not None and bound < top_rung and not allow:
        raise InputError(
            f"the admission bound of {endpoint.name} is {bound} ({endpoint.queue_max_depth_source})"
            f", below the top rung {top_rung}: rungs above it would only measure the admission "
            f"gate; expected a bound >= {top_rung} (redeploy unbounded, lower "
            f"{both_flags('--ladder')}, or pass {both_flags('--allow-shallow-queue')}; "
            "docs/method.md#the-admission-bound)"
        )


def top_rung(inputs: QmaxInputs) -> int | None:
    given = inputs.ladder.concurrencies
    return max(given) if given else None


def search_top(endpoint: Endpoint, inputs: QmaxInputs) -> int:
    """The highest concurrency to measure: --max-concurrency, and the admission bound."""
    bound = endpoint.queue_max_depth
    if bound is None or inputs.ladder.allow_shallow_queue:
        return inputs.ladder.max_concurrency
    return min(inputs.ladder.max_concurrency, bound)


def run_ladder(
    endpoint: Endpoint,
    inputs: QmaxInputs,
    *,
    progress: Progress,
    workload: Workload | None = None,
) -> LadderResult:
    workload = workload or inputs.workload.workload(endpoint.kind)
    allow_shallow = inputs.ladder.allow_shallow_queue
    check_admission_bound(endpoint, top_rung(inputs), allow_shallow)
    ladder = _Ladder(endpoint, inputs, workload, progress)
    check_admission_bound(endpoint, top_rung(inputs), allow_shallow)
    confirmations: dict[int, Confirmation] = {}
    for run_index in range(1, inputs.ladder.runs + 1):
        rungs = ladder.climb(run_index)
        if not inputs.ladder.no_confirm and (confirmed := ladder.confirm(rungs, run_index)):
            confirmations[run_index] = confirmed
    final = min(ladder.runs, key=lambda r: select_qmax(r, inputs.slo.ms)[0] or 0)
    ladder.confirmation = confirmations.get(ladder.runs.index(final) + 1)
    endpoint.thaw()  # the load has stopped: restore the endpoint before the CloudWatch join
    annotated = endpoint.annotate_rungs(final)
    result = ladder.artifact(annotated, complete=True, stop_reason=None)
    save(result, ladder.path)
    return LadderResult(artifact=result, path=ladder.path, records_path=ladder.records_path)


class _Ladder:
    """One qmax run's state: the endpoint's first answer, the files it writes, the rungs of each
    run, the audio reference from N=1 and, at the end, the answer's confirmation."""

    def __init__(
        self, endpoint: Endpoint, inputs: QmaxInputs, workload: Workload, progress: Progress
    ) -> None:
        self.endpoint = endpoint
        self.inputs = inputs
        self.workload = workload
        self.progress = progress
        slo_ms = inputs.slo.ms
        stall_s = stall_bound_s(slo_ms)
        # The first answer may take the endpoint's whole invocation limit: a cold instance loads
        # weights or compiles on its first request, and is slow once, not absent.
        first_s = max(stall_s, endpoint.invocation_limit_s)
        progress(
            f"qmax: asking {endpoint.name} for one answer first (up to {first_s:.0f} s, its "
            "invocation limit)"
        )
        # A lone answer silent long enough to raise the stall bound is asked for again, warm.
        self.health = require_answer(
            endpoint,
            inputs.workload.transport,
            self.probe_request,
            stall_s=first_s,
            cold_s=silence_kept_s(slo_ms),
        )
        if (cold := first_answer_line(self.health)) is not None:
            progress(cold)
        self.stall_s = stall_bound_s(slo_ms, self.health.quietest_s)
        # After a rung that heard nothing, a lone request may be as silent as a rung's may be: a
        # server that sends each answer whole, slower on a busy host, is not a stopped one.
        self.probe_stall_s = max(stall_s, PROBE_PATIENCE_S, self.stall_s)
        self.path = inputs.outputs.artifacts_dir / qmax_filename(
            inputs.workload.model, inputs.workload.transport, endpoint.slug
        )
        self.records_path = self.path.with_name(self.path.stem + ".requests.jsonl")
        self.inputs_path = self.path.with_name(self.path.stem + ".inputs.jsonl")
        for line in kept_lines(keep_previous([self.path, self.records_path, self.inputs_path])):
            progress(f"qmax: {line}")
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        self.records_path.write_text("")
        self.inputs_path.write_text("")
        self.provenance = Provenance(
            origin=f"{endpoint.kind}:{endpoint.name}",
            run_id=uuid.uuid4().hex,
            measured_at=iso_ns(time.time_ns()),
            tool_version=__version__,
            git_commit=git_commit(),
        )
        self.runs: list[list[Rung]] = []
        self.started = time.monotonic()
        self.host = endpoint.host()
        self.reference: AudioReference | None = None
        quality = inputs.quality
        self.quality = (
            QualityCheck(quality.wer_sample, quality.max_wer, quality.max_wer_increase)
            if quality.wer_sample
            else None
        )
        self.measured = 0
        self.confirmation: Confirmation | None = None  # the final run's, once the runs are done

    def probe_request(self, worker: int, seq: int) -> RequestSpec:
        return self.workload.request(1, worker, seq)

    def climb(self, run_index: int) -> list[Rung]:
        """One run of the search (or the given ladder), the artifact saved after every rung."""
        inputs = self.inputs
        rungs: list[Rung] = []
        self.runs.append(rungs)
        while (step := _next(rungs, self.endpoint, inputs)) is not None:
            rungs[:] = add_measurement(rungs, self.take(step, rungs, run_index))
            rung = rungs[-1]
            if rung.client is not None:
                rung.client.kept_time_up_to = max(
                    (r.concurrency for r in rungs if r.unusable_reason != "client_saturated"),
                    default=None,
                )
            save(self.artifact(rungs, complete=False, stop_reason="measuring"), self.path)
            elapsed = time.monotonic() - self.started
            left = _eta_s(0.0, rungs=rungs, inputs=inputs, run_index=run_index)
            self.progress(progress_line(rung, inputs.slo.ms, elapsed, left))
            try:
                check_admission_bound(
                    self.endpoint, top_rung(inputs), inputs.ladder.allow_shallow_queue
                )
            except InputError as exc:
                self.stop(rungs, f"refused: {exc}", exc)
        return rungs

    def take(self, step: Step, rungs: list[Rung], run_index: int) -> Rung:
        """Measure one rung (after the gap), stopping the run if the endpoint fell silent."""
        inputs, endpoint = self.inputs, self.endpoint
        eta_s = partial(_eta_s, rungs=list(rungs), inputs=inputs, run_index=run_index)
        if self.measured:
            wait_gap(inputs.ladder.gap_s, step, self.progress, eta_s)
        hold_s = inputs.ladder.hold_s
        again = None if step.phase == "confirm" else again_line(step, rungs, eta_s(hold_s))
        if again is not None:
            self.progress(again)
        rung, heard, self.reference = measure_rung(
            endpoint,
            inputs,
            self.workload,
            step,
            self.records_path,
            self.inputs_path,
            progress=self.progress,
            eta_s=eta_s,
            stall_s=self.stall_s,
            reference=self.reference,
            quality=self.quality,
        )
        seen = silence_after(
            endpoint,
            heard,
            inputs.workload.transport,
            self.probe_request,
            stall_s=self.probe_stall_s,
        )
        if seen is not None:
            reason = f"endpoint stopped answering at N={step.concurrency}: {seen}"
            self.stop(
                rungs,
                reason,
                EndpointUnavailable(
                    f"{endpoint.name}: {reason}; the rungs measured before it are kept in "
                    f"{self.path}, marked incomplete"
                ),
            )
        if inputs.slo.metric == "audible" and (
            self.reference is None or not self.reference.audible
        ):
            refusal = InputError(audible_refusal(endpoint))
            self.stop(rungs, "refused: nothing audible at N=1", refusal)
        self.measured += 1
        return rung.model_copy(update={"run": run_index, "phase": step.phase})

    def confirm(self, rungs: list[Rung], run_index: int) -> Confirmation | None:
        """The answer's passing rung measured once more, last (docs/method.md)."""
        slo_ms = self.inputs.slo.ms
        concurrency = confirmation_concurrency(rungs, *select_qmax(rungs, slo_ms))
        if concurrency is None:
            return None
        before = next(r for r in rungs if r.concurrency == concurrency)
        self.progress(
            f"qmax N={concurrency} confirm: the answer's passing rung measured once more, last, "
            f"to check the server still serves at the speed it was measured at; "
            f"{both_flags('--no-confirm')} skips it"
        )
        after = self.take(Step(concurrency, "confirm"), rungs, run_index)
        elapsed = time.monotonic() - self.started
        self.progress(progress_line(after, slo_ms, elapsed, 0.0))
        return judge_confirmation(before, after, slo_ms)

    def stop(self, rungs: list[Rung], reason: str, error: Exception) -> NoReturn:
        """End the run early: the rungs measured so far stay in the artifact, marked incomplete."""
        save(self.artifact(rungs, complete=False, stop_reason=reason), self.path)
        raise error

    def artifact(self, rungs: list[Rung], complete: bool, stop_reason: str | None) -> QmaxArtifact:
        inputs, endpoint = self.inputs, self.endpoint
        slo_ms = inputs.slo.ms
        confirmation = self.confirmation if complete else None
        q_max, bracketed = select_qmax(rungs, slo_ms)
        if confirmation is not None and confirmation.outcome == "changed":
            q_max, bracketed = None, False  # a pair from two servers answers for neither
        by_c = {r.concurrency: r for r in rungs}
        c1 = by_c.get(1)
        usable_c1 = c1 if c1 is not None and c1.usable else None
        at_q_max = by_c.get(q_max) if q_max is not None else None
        return QmaxArtifact(
            model=inputs.workload.model,
            endpoint=endpoint.name,
            transport=inputs.workload.transport,  # type: ignore[arg-type]
            slug=endpoint.slug,
            deployed_config=endpoint.deployed,
            slo_ms=slo_ms,
            slo_metric=inputs.slo.metric,
            q_max=q_max,
            q_max_bracketed=bracketed,
            s_mean_s=_s(usable_c1.latency_ms.mean) if usable_c1 else None,
            s_p95_s=_s(usable_c1.latency_ms.p95) if usable_c1 else None,
            ttfab_p95_at_c1_ms=usable_c1.ttfab_ms.p95 if usable_c1 else None,
            frozen=endpoint.frozen_capacity,
            unbounded_queue=endpoint.queue_max_depth is None,
            rungs=sorted(rungs, key=lambda r: (r.run, r.concurrency)),
            provenance=self.provenance,
            complete=complete,
            stop_reason=stop_reason,
            records_file=self.records_path.name,
            inputs_file=self.inputs_path.name,
            settings=self.settings_record(),
            runs_q_max=[select_qmax(r, slo_ms)[0] for r in self.runs],
            admission_bound=endpoint.queue_max_depth,
            admission_bound_source=endpoint.queue_max_depth_source,
            probe=self.health.summary(),
            host=self.host,
            non_monotonic=falls_in_p95(rungs),
            audio_reference=self.reference.summary() if self.reference is not None else None,
            inconclusive=inconclusive_rungs(rungs, q_max, slo_ms),
            confirmation=confirmation,
            chars_per_s_at_q_max=at_q_max.chars_per_s if at_q_max else None,
            audio_s_per_s_at_q_max=at_q_max.audio_throughput if at_q_max else None,
            slo_tiers=slo_tiers(rungs, inputs.slo.tiers_ms),
        )

    def settings_record(self) -> dict[str, object]:
        """The run's settings as the artifact keeps them."""
        ladder, quality, workload = self.inputs.ladder, self.inputs.quality, self.workload
        given = ladder.concurrencies
        return {
            "ladder": list(given) if given else None,
            "max_concurrency": None if given else search_top(self.endpoint, self.inputs),
            "hold_s": ladder.hold_s,
            "measure_s": ladder.measure_s,
            "gap_s": ladder.gap_s,
            "runs": ladder.runs,
            "texts": len(workload.texts),
            "voices": list(workload.voices),
            "format": workload.format,
            "wer_sample": quality.wer_sample,
            "max_wer": quality.max_wer if quality.wer_sample else None,
            "max_wer_increase": quality.max_wer_increase if quality.wer_sample else None,
            **({"request": workload.request_summary} if workload.request_summary else {}),
        }


def audible_refusal(endpoint: Endpoint) -> str:
    """Why the audible clock cannot time this endpoint: its answers at N=1 held no 16-bit audio
    that rose above its own silence, so no sample of any answer can be called speech."""
    return (
        f"{both_flags('--slo-metric')} audible: the answers of {endpoint.name} at N=1 never rose "
        "above their own silence level (or carried no 16-bit audio), so no answer has an audible "
        "start to time; expected answers with speech, or the ttfab or playback clock"
    )


def wait_gap(gap_s: float, step: Step, progress: Progress, eta_s: Callable[[float], float]) -> None:
    """--gap-s between rungs, with a line when it starts and every PROGRESS_EVERY_S in it."""
    end = time.monotonic() + gap_s
    while (left := end - time.monotonic()) > 0:
        if left >= PROGRESS_EVERY_S / 2:
            eta = mmss(eta_s(0.0) - gap_s + left)
            progress(
                f"qmax: gap, {left:.0f} s before N={step.concurrency} {step.phase}; run ETA {eta}"
            )
        time.sleep(min(left, PROGRESS_EVERY_S))


def _eta_s(rung_left_s: float, *, rungs: list[Rung], inputs: QmaxInputs, run_index: int) -> float:
    """The whole run's time left; during a rung, `rung_left_s` is that rung's own rest."""
    ladder = inputs.ladder
    per_rung = ladder.hold_s + ladder.gap_s
    left = rungs_left(rungs, inputs.slo.ms, ladder=ladder.concurrencies)
    if rung_left_s > 0:
        left = max(0, left - 1)  # the rung running now is one of them
    later_runs = (ladder.runs - run_index) * max(1, len(rungs) + 1)
    confirming = 0 if ladder.no_confirm else 1
    return rung_left_s + (left + later_runs + confirming) * per_rung


def _next(rungs: list[Rung], endpoint: Endpoint, inputs: QmaxInputs) -> Step | None:
    """The next rung of the lowest SLO tier not yet bracketed (one tier: the SLO's)."""
    for slo_ms in inputs.slo.tiers_ms:
        step = next_step(
            at_slo(rungs, slo_ms) if slo_ms != inputs.slo.ms else rungs,
            slo_ms,
            ladder=inputs.ladder.concurrencies,
            max_concurrency=search_top(endpoint, inputs),
        )
        if step is not None:
            return step
    return None


def slo_tiers(rungs: list[Rung], tiers_ms: tuple[float, ...]) -> list[SloTier]:
    """Q_max at each SLO tier from the same rungs; none for a run of one SLO."""
    if len(tiers_ms) < 2:
        return []
    tiers = []
    for slo_ms in tiers_ms:
        judged = at_slo(rungs, slo_ms)
        q_max, bracketed = select_qmax(judged, slo_ms)
        tiers.append(
            SloTier(
                slo_ms=slo_ms,
                q_max=q_max,
                q_max_bracketed=bracketed,
                inconclusive=inconclusive_rungs(judged, q_max, slo_ms),
            )
        )
    return tiers


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0
