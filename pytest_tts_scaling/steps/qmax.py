"""The qmax measurement: search (or climb the given ladder), judge each rung, keep the artifact.

The artifact is rewritten atomically after every rung (marked incomplete until the end), so an
interrupted run keeps everything it measured. Per-request records go to a JSONL file beside it.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NoReturn

import numpy as np

from pytest_tts_scaling import __version__
from pytest_tts_scaling.artifacts import append_jsonl, keep_previous, kept_lines, save
from pytest_tts_scaling.core.records import RequestRecord, RequestSpec
from pytest_tts_scaling.core.schema import Provenance, QmaxArtifact, Rung, qmax_filename
from pytest_tts_scaling.core.search import (
    Step,
    add_measurement,
    next_step,
    rungs_left,
    schedule_estimate_s,
    worst_case_rungs,
)
from pytest_tts_scaling.core.stats import time_weighted_in_flight
from pytest_tts_scaling.core.timeline import from_epoch_ns, iso
from pytest_tts_scaling.core.verdicts import (
    MAX_MEASUREMENTS,
    RungInputs,
    falls_in_p95,
    goodput_ttfab_ms,
    judge,
    select_qmax,
    straddles_slo,
)
from pytest_tts_scaling.endpoints.base import Endpoint
from pytest_tts_scaling.errors import EndpointUnavailable, InputError
from pytest_tts_scaling.load.engine import RungRun, client_lag_bound_ms, run_rung, stall_bound_s
from pytest_tts_scaling.load.health import learn_admission_bound, require_answer, silence_after
from pytest_tts_scaling.load.host import load_average
from pytest_tts_scaling.load.workload import Workload, workload_for
from pytest_tts_scaling.options import ResolvedOptions

# A rung whose p95 confidence interval contains the SLO is held this many extra windows at most.
MAX_EXTENSIONS = 2
# A p95 of fewer completed requests is little more than their largest: a rung short of this many is
# held up to MAX_SAMPLE_EXTENSIONS extra windows to reach it, and flagged `few_samples` if not.
MIN_COMPLETIONS = 20
MAX_SAMPLE_EXTENSIONS = 4
# The longest a rung can be held: hold plus this many measure windows.
MOST_EXTENSIONS = max(MAX_EXTENSIONS, MAX_SAMPLE_EXTENSIONS)
# The health probes (before rung 1, and after a rung that heard no audio) wait longer than a
# rung's stall bound for a first answer: a slow endpoint on a busy host is not a dead one
# (refusals and error statuses are still seen at once).
PROBE_PATIENCE_S = 20.0
# While a rung runs, a progress line this often (and one when its measure window opens).
PROGRESS_EVERY_S = 10.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LadderResult:
    artifact: QmaxArtifact
    path: Path
    records_path: Path

    def summary_lines(self) -> list[str]:
        a = self.artifact
        lines = [
            f"qmax: {verdict_words(a)} for {a.model} over {a.transport} on {a.slug} "
            f"at p95 TTFAB <= {a.slo_ms:g} ms",
            f"qmax: artifact {self.path}",
            f"qmax: per-request records {self.records_path}",
        ]
        if a.deployed_config.synthetic_engine:
            lines.append("qmax: measured on the SYNTHETIC engine (a cost model; no model ran)")
        elif a.deployed_config.development_model:
            lines.append("qmax: measured on the untrained development model (real architecture)")
        if a.admission_bound is not None:
            lines.append(f"qmax: admission bound {a.admission_bound} ({a.admission_bound_source})")
        lines.extend(client_saturation_lines(a.rungs))
        lines.extend(trust_lines(a))
        return lines


def client_saturation_lines(rungs: list[Rung]) -> list[str]:
    """Where the client could not keep time, and up to which N it could (issue 12)."""
    saturated = [r for r in rungs if r.unusable_reason == "client_saturated" and r.client]
    if not saturated:
        return []
    first = min(saturated, key=lambda r: r.concurrency)
    client = first.client
    assert client is not None
    kept = f"N={client.kept_time_up_to}" if client.kept_time_up_to else "no rung"
    return [
        f"qmax: the load client could not keep time at N={first.concurrency} (event-loop lag "
        f"p99 {client.worst_lag_p99_ms or 0:.0f} ms > {client.lag_bound_ms or 0:.0f} ms, CPU "
        f"{(client.cpu_share or 0) * 100:.0f}%); it kept time up to {kept}: measure higher "
        "concurrency from more client processes"
    ]


def trust_lines(a: QmaxArtifact) -> list[str]:
    """What makes the numbers less trustworthy than they look: a busy host, thin rungs, a fall."""
    lines: list[str] = []
    host = a.host
    loads = [r.load_avg_1m for r in a.rungs if r.load_avg_1m is not None]
    if host is not None and loads and max(loads) > host.cpu_count:
        shared = "shared by the server and the client" if host.cores_shared else "split"
        lines.append(
            f"qmax: the host was busy: load average up to {max(loads):.1f} on {host.cpu_count} "
            f"cores ({shared}); the curve measures this machine's contention too"
        )
    thin = sorted({r.concurrency for r in a.rungs if r.usable and r.few_samples})
    if thin:
        lines.append(
            f"qmax: N={', '.join(map(str, thin))} judged on fewer than {MIN_COMPLETIONS} "
            "completed requests, even after extending the window: their p95 is little more "
            "than their slowest request (use a longer --measure-s)"
        )
    if a.non_monotonic:
        lines.append(
            f"qmax: p95 TTFAB fell at N={', '.join(map(str, a.non_monotonic))} below a lower "
            "rung's, beyond both intervals: the host or the endpoint changed during the run; "
            "re-run it on a quiet machine"
        )
    return lines


def verdict_words(a: QmaxArtifact) -> str:
    """What the run found, in words that cannot contradict each other."""
    failing = [r for r in a.rungs if r.usable and not r.meets_slo]
    if a.q_max is None:
        if failing and all(r.fail_reason == "errors" for r in failing):
            kinds = sorted({k for r in failing for k in r.errors_by_kind})
            return f"no rung met the SLO: requests ended without audio ({', '.join(kinds)})"
        if not any(r.usable for r in a.rungs):
            return "no rung could be judged (every rung unusable)"
        return "no rung met the SLO"
    if a.q_max_bracketed:
        above = min(
            (r for r in failing if r.concurrency > (a.q_max or 0)), key=lambda r: r.concurrency
        )
        why = fail_words(above, a.slo_ms)
        return f"Q_max {a.q_max} (bracketed: N={above.concurrency} failed, {why})"
    return f"Q_max {a.q_max} (lower bound: no rung above it failed clearly)"


def fail_words(rung: Rung, slo_ms: float) -> str:
    if rung.fail_reason == "errors":
        share = 100.0 * rung.failed / max(1, rung.failed + rung.completed + rung.rejected)
        kinds = ", ".join(f"{k} {n}" for k, n in rung.errors_by_kind.items())
        return f"{share:.1f}% of requests without audio: {kinds}"
    p95 = rung.goodput_ttfab_p95_ms or rung.ttfab_ms.p95 or 0.0
    return f"p95 TTFAB {p95:.0f} ms > SLO {slo_ms:g} ms"


def iso_ns(epoch_ns: int) -> str:
    return iso(from_epoch_ns(epoch_ns))


def describe_schedule(settings: ResolvedOptions) -> list[str]:
    """The --dry-run output: what would run and for how long, worst case included."""
    run = settings.run
    head = (
        f"qmax dry run: {run.kind} endpoint {run.endpoint or run.endpoint_url or '(local default)'}"
        f", transport {run.transport}, SLO p95 TTFAB <= {settings.slo_ms:g} ms"
    )
    timing = (
        f"hold {settings.hold_s:g} s (last {settings.measure_s:g} s measured), gap "
        f"{settings.gap_s:g} s, runs {run.runs}"
    )
    longest_rung_s = settings.hold_s + MOST_EXTENSIONS * settings.measure_s
    if settings.ladder is None:
        rungs = worst_case_rungs(settings.max_concurrency)
        worst = rungs * MAX_MEASUREMENTS
        worst_s = run.runs * (worst * longest_rung_s + (worst - 1) * settings.gap_s)
        typical_s = run.runs * schedule_estimate_s((1, 2, 3, 4, 5), settings.hold_s, settings.gap_s)
        return [
            head,
            f"adaptive search up to N={settings.max_concurrency}: {timing}",
            "  rung 1: N=1; then the predicted SLO crossing and its neighbours, ending on "
            "N pass / N+1 fail",
            f"estimate: about {typical_s / 60:.1f} min (4-6 rungs); worst case "
            f"{worst_s / 60:.1f} min: {rungs} concurrencies, each measured up to "
            f"{MAX_MEASUREMENTS} times (again when unusable, re-tested when a failure is "
            f"doubtful) and held up to {MOST_EXTENSIONS} extra measure windows",
        ]
    ladder = settings.ladder
    estimate = schedule_estimate_s(ladder, settings.hold_s, settings.gap_s)
    lines = [head, f"ladder {','.join(map(str, ladder))}: {timing}"]
    elapsed = 0.0
    for index, concurrency in enumerate(ladder):
        if index:
            elapsed += settings.gap_s
        window_start = elapsed + settings.hold_s - settings.measure_s
        lines.append(
            f"  rung {index + 1}: N={concurrency:<4} starts at +{elapsed:7.0f} s, measured "
            f"+{window_start:.0f}..+{elapsed + settings.hold_s:.0f} s"
        )
        elapsed += settings.hold_s
    lines.append(
        f"estimate: {run.runs * estimate / 60:.1f} min if every rung is climbed, plus up to "
        f"{MOST_EXTENSIONS} extra measure windows per inconclusive or sparse rung and bisection "
        "rungs after the first failure; the ladder stops after two failing rungs"
    )
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
    """Refuse a ladder that climbs above the container's admission bound (SPEC §4), whether
    it was deployed (QUEUE_MAX_DEPTH) or named by the endpoint's own 503 answers. The search
    (no ladder, `top_rung` None) is not refused: it stops below the bound (:func:`search_top`)."""
    bound = endpoint.queue_max_depth
    if top_rung is not None and bound is not None and bound < top_rung and not allow:
        raise InputError(
            f"the admission bound of {endpoint.name} is {bound} ({endpoint.queue_max_depth_source})"
            f", below the top rung {top_rung}: rungs above it would only measure the admission "
            f"gate; expected a bound >= {top_rung} (redeploy unbounded, lower --ladder, or pass "
            "--allow-shallow-queue)"
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
    health = require_answer(endpoint, run.transport, probe_request, stall_s=probe_stall_s)
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
        return QmaxArtifact(
            model=run.model,
            endpoint=endpoint.name,
            transport=run.transport,  # type: ignore[arg-type]
            slug=endpoint.slug,
            deployed_config=endpoint.deployed,
            slo_ms=settings.slo_ms,
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
            },
            runs_q_max=[select_qmax(r, settings.slo_ms)[0] for r in runs],
            admission_bound=endpoint.queue_max_depth,
            admission_bound_source=endpoint.queue_max_depth_source,
            probe=health.summary(),
            host=host,
            non_monotonic=falls_in_p95(rungs),
        )

    def stop(rungs: list[Rung], reason: str, error: Exception) -> NoReturn:
        """End the run early: the rungs measured so far stay in the artifact, marked incomplete."""
        save(artifact(rungs, complete=False, stop_reason=reason), path)
        raise error

    measured = 0
    for run_index in range(1, run.runs + 1):
        rungs: list[Rung] = []
        runs.append(rungs)
        while (step := _next(rungs, endpoint, settings)) is not None:
            concurrency = step.concurrency
            if measured:
                time.sleep(settings.gap_s)
            eta_s = partial(_eta_s, rungs=list(rungs), settings=settings, run_index=run_index)

            rung, heard = _measure_rung(
                endpoint,
                settings,
                workload,
                step,
                records_path,
                inputs_path,
                progress=progress,
                eta_s=eta_s,
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
            progress(_progress_line(rung, settings.slo_ms, elapsed, left))
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
    return next_step(
        rungs,
        settings.slo_ms,
        ladder=settings.ladder,
        max_concurrency=search_top(endpoint, settings),
    )


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _measure_rung(
    endpoint: Endpoint,
    settings: ResolvedOptions,
    workload: Workload,
    step: Step,
    records_path: Path,
    inputs_path: Path,
    *,
    progress: Progress,
    eta_s: Callable[[float], float],
) -> tuple[Rung, RungRun]:
    """The judged rung and what the engine heard during it; progress lines while it runs."""
    concurrency = step.concurrency
    before = endpoint.instance_count()
    inputs: list[dict[str, object]] = []

    def make_request(worker: int, seq: int) -> RequestSpec:
        spec = workload.request(concurrency, worker, seq)
        inputs.append(spec.input_row(rung=concurrency, worker=worker, seq=seq))
        return spec

    heard: list[RequestRecord] = []

    async def report_progress() -> None:
        started = time.perf_counter_ns()
        warmup_s = settings.hold_s - settings.measure_s
        window_start_ns = started + int(warmup_s * 1e9)
        for at in sorted({warmup_s, *_every(PROGRESS_EVERY_S, settings.hold_s)}):
            await asyncio.sleep(max(0.0, at - (time.perf_counter_ns() - started) / 1e9))
            elapsed = (time.perf_counter_ns() - started) / 1e9
            left = max(0.001, settings.hold_s - elapsed)
            progress(_live_line(step, settings, heard, window_start_ns, elapsed, eta_s(left)))

    async def measure() -> RungRun:
        async with endpoint.transport(settings.run.transport, concurrency=concurrency) as transport:
            ticker = asyncio.create_task(report_progress())
            try:
                return await run_rung(
                    transport,
                    make_request,
                    concurrency=concurrency,
                    hold_s=settings.hold_s,
                    measure_s=settings.measure_s,
                    should_extend=extension_rule(settings.slo_ms),
                    max_extensions=MOST_EXTENSIONS,
                    stall_s=stall_bound_s(settings.slo_ms),
                    on_record=heard.append,
                )
            finally:
                ticker.cancel()

    result = asyncio.run(measure())
    after = endpoint.instance_count()
    learn_admission_bound(endpoint, result.records, f"at N={concurrency}")
    lag_bound = client_lag_bound_ms(settings.slo_ms)
    append_jsonl(records_path, [_record_row(r, result) for r in result.records])
    append_jsonl(inputs_path, inputs)
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
        settings.slo_ms,
    )
    client = result.client.model_copy(update={"lag_bound_ms": lag_bound})
    update = {
        "extensions": result.extensions,
        "client": client,
        "few_samples": rung.completed < MIN_COMPLETIONS,
        "load_avg_1m": load_average(),
    }
    return rung.model_copy(update=update), result


def extension_rule(slo_ms: float) -> Callable[[list[RequestRecord]], bool]:
    """Whether a rung's window needs one more measure window, given the extensions so far.

    Too few completions for a p95 (MIN_COMPLETIONS) earn up to MAX_SAMPLE_EXTENSIONS more
    windows, so a slow or busy endpoint is judged on enough requests rather than on one; a p95
    interval that contains the SLO earns up to MAX_EXTENSIONS.
    """
    granted = 0

    def should_extend(window: list[RequestRecord]) -> bool:
        nonlocal granted
        completed = sum(1 for r in window if r.status == "ok")
        wanted = (completed < MIN_COMPLETIONS and granted < MAX_SAMPLE_EXTENSIONS) or (
            granted < MAX_EXTENSIONS and straddles_slo(window, slo_ms)
        )
        granted += wanted
        return wanted

    return should_extend


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


def _live_line(
    step: Step,
    settings: ResolvedOptions,
    heard: list[RequestRecord],
    window_start_ns: int,
    elapsed_s: float,
    eta_s: float,
) -> str:
    """One rung in progress: N, phase, p95 so far against the SLO, and the whole run's ETA."""
    warmup_s = settings.hold_s - settings.measure_s
    in_window = [r for r in heard if r.start_ns >= window_start_ns]
    if elapsed_s < warmup_s - 0.05:
        phase = f"warm-up {elapsed_s:.0f}/{warmup_s:g} s"
    else:
        phase = f"measuring {max(0.0, elapsed_s - warmup_s):.0f}/{settings.measure_s:g} s"
    seen, where = (in_window, "in the window") if in_window else (heard, "in the warm-up")
    goodput = goodput_ttfab_ms(seen, settings.slo_ms)
    p95 = f"{float(np.percentile(goodput, 95)):.0f} ms {where}" if goodput else "n/a"
    return (
        f"qmax N={step.concurrency} {step.phase}: {phase}, p95 TTFAB so far {p95} "
        f"(SLO {settings.slo_ms:g} ms), {len(heard)} done; run ETA {_mmss(eta_s)}"
    )


def _progress_line(rung: Rung, slo_ms: float, elapsed_s: float, left_s: float) -> str:
    p95 = rung.goodput_ttfab_p95_ms if rung.goodput_ttfab_p95_ms is not None else rung.ttfab_ms.p95
    verdict = (
        f"unusable ({rung.unusable_reason})"
        if not rung.usable
        else "pass"
        if rung.meets_slo
        else f"FAIL ({rung.fail_reason})"
    )
    p95_text = "n/a" if p95 is None else f"{p95:.0f} ms"
    errors = f", {rung.failed} without audio" if rung.failed else ""
    again = f", measurement {rung.remeasured + 1}" if rung.remeasured else ""
    return (
        f"qmax N={rung.concurrency:<4} {rung.phase:<9} p95 TTFAB {p95_text} (SLO {slo_ms:g} ms) "
        f"{verdict}; {rung.completed} done{errors}, {rung.throughput_rps:.1f} rps, in-flight "
        f"{rung.concurrency_mean:.1f}{again}; elapsed {_mmss(elapsed_s)}, about {_mmss(left_s)} "
        "left"
    )


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
