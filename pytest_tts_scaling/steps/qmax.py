"""The qmax measurement: search (or climb the given ladder), judge each rung, keep the artifact.

The artifact is rewritten atomically after every rung (marked incomplete until the end), so an
interrupted run keeps everything it measured. Per-request records go to a JSONL file beside it.
One rung is measured in steps/qmax_rung.py; what the run says, in steps/qmax_words.py.
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
from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.core.records import RequestSpec
from pytest_tts_scaling.core.schema import (
    CLOCK_WORDS,
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
from pytest_tts_scaling.load.workload import Workload, workload_for
from pytest_tts_scaling.options import ResolvedOptions
from pytest_tts_scaling.steps.qmax_health import require_answer, silence_after
from pytest_tts_scaling.steps.qmax_quality import QualityCheck
from pytest_tts_scaling.steps.qmax_rung import (
    PROGRESS_EVERY_S,
    iso_ns,
    measure_rung,
    mmss,
)
from pytest_tts_scaling.steps.qmax_words import (
    again_line,
    client_saturation_lines,
    progress_line,
    tier_words,
    trust_lines,
)

# The health probes (before rung 1, and after a rung that heard no audio) wait longer than a
# rung's stall bound for a first answer: a slow endpoint on a busy host is not a dead one
# (refusals and error statuses are still seen at once).
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


def top_rung(settings: ResolvedOptions) -> int | None:
    return max(settings.ladder) if settings.ladder else None


def search_top(endpoint: Endpoint, settings: ResolvedOptions) -> int:
    """The highest concurrency to measure: --max-concurrency, and the admission bound."""
    bound = endpoint.queue_max_depth
    if bound is None or settings.run.allow_shallow_queue:
        return settings.max_concurrency
    return min(settings.max_concurrency, bound)


def run_ladder(
    endpoint: Endpoint,
    settings: ResolvedOptions,
    *,
    progress: Progress,
    workload: Workload | None = None,
) -> LadderResult:
    run = settings.run
    workload = workload or workload_for(run, endpoint.kind)
    check_admission_bound(endpoint, top_rung(settings), run.allow_shallow_queue)
    stall_s = stall_bound_s(settings.slo_ms)

    def probe_request(worker: int, seq: int) -> RequestSpec:
        return workload.request(1, worker, seq)

    probe_stall_s = max(stall_s, PROBE_PATIENCE_S)
    progress(f"qmax: asking {endpoint.name} for one answer first (up to {probe_stall_s:.0f} s)")
    # A lone answer silent long enough to raise the stall bound is asked for again, warm.
    health = require_answer(
        endpoint,
        run.transport,
        probe_request,
        stall_s=probe_stall_s,
        cold_s=silence_kept_s(settings.slo_ms),
    )
    stall_s = stall_bound_s(settings.slo_ms, health.quietest_s)
    # After a rung that heard nothing, a lone request may be as silent as a rung's may be: a
    # server that sends each answer whole, slower on a busy host, is not a stopped one.
    probe_stall_s = max(probe_stall_s, stall_s)
    check_admission_bound(endpoint, top_rung(settings), run.allow_shallow_queue)
    path = run.artifacts_dir / qmax_filename(run.model, run.transport, endpoint.slug)
    records_path = path.with_name(path.stem + ".requests.jsonl")
    inputs_path = path.with_name(path.stem + ".inputs.jsonl")
    for line in kept_lines(keep_previous([path, records_path, inputs_path])):
        progress(f"qmax: {line}")
    records_path.parent.mkdir(parents=True, exist_ok=True)
    records_path.write_text("")
    inputs_path.write_text("")
    provenance = Provenance(
        origin=f"{endpoint.kind}:{endpoint.name}",
        run_id=uuid.uuid4().hex,
        measured_at=iso_ns(time.time_ns()),
        tool_version=__version__,
        git_commit=git_commit(),
    )
    runs: list[list[Rung]] = []
    started = time.monotonic()
    host = endpoint.host()

    def artifact(rungs: list[Rung], complete: bool, stop_reason: str | None) -> QmaxArtifact:
        q_max, bracketed = select_qmax(rungs, settings.slo_ms)
        by_c = {r.concurrency: r for r in rungs}
        c1 = by_c.get(1)
        usable_c1 = c1 if c1 is not None and c1.usable else None
        at_q_max = by_c.get(q_max) if q_max is not None else None
        return QmaxArtifact(
            model=run.model,
            endpoint=endpoint.name,
            transport=run.transport,  # type: ignore[arg-type]
            slug=endpoint.slug,
            deployed_config=endpoint.deployed,
            slo_ms=settings.slo_ms,
            slo_metric=run.slo_metric,
            q_max=q_max,
            q_max_bracketed=bracketed,
            s_mean_s=_s(usable_c1.latency_ms.mean) if usable_c1 else None,
            s_p95_s=_s(usable_c1.latency_ms.p95) if usable_c1 else None,
            ttfab_p95_at_c1_ms=usable_c1.ttfab_ms.p95 if usable_c1 else None,
            frozen=endpoint.frozen_capacity,
            unbounded_queue=endpoint.queue_max_depth is None,
            rungs=sorted(rungs, key=lambda r: (r.run, r.concurrency)),
            provenance=provenance,
            complete=complete,
            stop_reason=stop_reason,
            records_file=records_path.name,
            inputs_file=inputs_path.name,
            settings={
                "ladder": list(settings.ladder) if settings.ladder else None,
                "max_concurrency": None if settings.ladder else search_top(endpoint, settings),
                "hold_s": settings.hold_s,
                "measure_s": settings.measure_s,
                "gap_s": settings.gap_s,
                "runs": run.runs,
                "texts": len(workload.texts),
                "voices": list(workload.voices),
                "format": workload.format,
                "wer_sample": run.wer_sample,
                "max_wer": run.max_wer if run.wer_sample else None,
                "max_wer_increase": run.max_wer_increase if run.wer_sample else None,
                **({"request": workload.request_summary} if workload.request_summary else {}),
            },
            runs_q_max=[select_qmax(r, settings.slo_ms)[0] for r in runs],
            admission_bound=endpoint.queue_max_depth,
            admission_bound_source=endpoint.queue_max_depth_source,
            probe=health.summary(),
            host=host,
            non_monotonic=falls_in_p95(rungs),
            audio_reference=reference.summary() if reference is not None else None,
            inconclusive=inconclusive_rungs(rungs, q_max, settings.slo_ms),
            chars_per_s_at_q_max=at_q_max.chars_per_s if at_q_max else None,
            audio_s_per_s_at_q_max=at_q_max.audio_throughput if at_q_max else None,
            slo_tiers=slo_tiers(rungs, settings.slo_tiers_ms),
        )

    def stop(rungs: list[Rung], reason: str, error: Exception) -> NoReturn:
        """End the run early: the rungs measured so far stay in the artifact, marked incomplete."""
        save(artifact(rungs, complete=False, stop_reason=reason), path)
        raise error

    reference: AudioReference | None = None
    quality = (
        QualityCheck(run.wer_sample, run.max_wer, run.max_wer_increase) if run.wer_sample else None
    )
    measured = 0
    for run_index in range(1, run.runs + 1):
        rungs: list[Rung] = []
        runs.append(rungs)
        while (step := _next(rungs, endpoint, settings)) is not None:
            concurrency = step.concurrency
            eta_s = partial(_eta_s, rungs=list(rungs), settings=settings, run_index=run_index)
            if measured:
                wait_gap(settings.gap_s, step, progress, eta_s)
            if (again := again_line(step, rungs, eta_s(settings.hold_s))) is not None:
                progress(again)

            rung, heard, reference = measure_rung(
                endpoint,
                settings,
                workload,
                step,
                records_path,
                inputs_path,
                progress=progress,
                eta_s=eta_s,
                stall_s=stall_s,
                reference=reference,
                quality=quality,
            )
            seen = silence_after(
                endpoint, heard, run.transport, probe_request, stall_s=probe_stall_s
            )
            if seen is not None:
                reason = f"endpoint stopped answering at N={concurrency}: {seen}"
                stop(
                    rungs,
                    reason,
                    EndpointUnavailable(
                        f"{endpoint.name}: {reason}; the rungs measured before it are kept in "
                        f"{path}, marked incomplete"
                    ),
                )
            if run.slo_metric == "audible" and (reference is None or not reference.audible):
                refusal = InputError(audible_refusal(endpoint))
                stop(rungs, "refused: nothing audible at N=1", refusal)
            rung = rung.model_copy(update={"run": run_index, "phase": step.phase})
            rungs[:] = add_measurement(rungs, rung)
            rung = rungs[-1]
            measured += 1
            if rung.client is not None:
                rung.client.kept_time_up_to = max(
                    (r.concurrency for r in rungs if r.unusable_reason != "client_saturated"),
                    default=None,
                )
            save(artifact(rungs, complete=False, stop_reason="measuring"), path)
            elapsed = time.monotonic() - started
            left = _eta_s(0.0, rungs=rungs, settings=settings, run_index=run_index)
            progress(progress_line(rung, settings.slo_ms, elapsed, left))
            try:
                check_admission_bound(endpoint, top_rung(settings), run.allow_shallow_queue)
            except InputError as exc:
                stop(rungs, f"refused: {exc}", exc)
    final = min(runs, key=lambda r: select_qmax(r, settings.slo_ms)[0] or 0)
    endpoint.thaw()  # the load has stopped: restore the endpoint before the CloudWatch join
    annotated = endpoint.annotate_rungs(final)
    result = artifact(annotated, complete=True, stop_reason=None)
    save(result, path)
    return LadderResult(artifact=result, path=path, records_path=records_path)


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


def _eta_s(
    rung_left_s: float, *, rungs: list[Rung], settings: ResolvedOptions, run_index: int
) -> float:
    """The whole run's time left; during a rung, `rung_left_s` is that rung's own rest."""
    per_rung = settings.hold_s + settings.gap_s
    left = rungs_left(rungs, settings.slo_ms, ladder=settings.ladder)
    if rung_left_s > 0:
        left = max(0, left - 1)  # the rung running now is one of them
    later_runs = (settings.run.runs - run_index) * max(1, len(rungs) + 1)
    return rung_left_s + (left + later_runs) * per_rung


def _next(rungs: list[Rung], endpoint: Endpoint, settings: ResolvedOptions) -> Step | None:
    """The next rung of the lowest SLO tier not yet bracketed (one tier: the SLO's)."""
    for slo_ms in settings.slo_tiers_ms:
        step = next_step(
            at_slo(rungs, slo_ms) if slo_ms != settings.slo_ms else rungs,
            slo_ms,
            ladder=settings.ladder,
            max_concurrency=search_top(endpoint, settings),
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
