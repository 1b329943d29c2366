"""The qmax measurement: climb the ladder, judge each rung, keep the artifact current.

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
from pathlib import Path
from typing import NoReturn

from pytest_tts_scaling import __version__
from pytest_tts_scaling.artifacts import append_jsonl, save
from pytest_tts_scaling.endpoint import Endpoint
from pytest_tts_scaling.errors import EndpointUnavailable, InputError
from pytest_tts_scaling.health import learn_admission_bound, require_answer, silence_after
from pytest_tts_scaling.loadgen import RungRun, client_lag_bound_ms, run_rung, stall_bound_s
from pytest_tts_scaling.options import ResolvedOptions
from pytest_tts_scaling.records import RequestRecord, RequestSpec
from pytest_tts_scaling.schema import Provenance, QmaxArtifact, Rung, qmax_filename
from pytest_tts_scaling.stats import time_weighted_in_flight
from pytest_tts_scaling.timeline import from_epoch_ns, iso
from pytest_tts_scaling.verdicts import (
    RungInputs,
    judge,
    next_concurrency,
    schedule_estimate_s,
    select_qmax,
    straddles_slo,
)
from pytest_tts_scaling.workload import Workload, workload_for

# A rung whose p95 confidence interval contains the SLO is held this many extra windows at most.
MAX_EXTENSIONS = 2

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LadderResult:
    artifact: QmaxArtifact
    path: Path
    records_path: Path

    def summary_lines(self) -> list[str]:
        a = self.artifact
        found = "not found" if a.q_max is None else str(a.q_max)
        kind = "bracketed" if a.q_max_bracketed else "lower bound"
        lines = [
            f"qmax: Q_max {found} ({kind}) for {a.model} over {a.transport} on {a.slug} "
            f"at p95 TTFAB <= {a.slo_ms:g} ms",
            f"qmax: artifact {self.path}",
            f"qmax: per-request records {self.records_path}",
        ]
        if a.endpoint == "local":
            lines.append("qmax: measured on the untrained development model (real architecture)")
        if a.admission_bound is not None:
            lines.append(f"qmax: admission bound {a.admission_bound} ({a.admission_bound_source})")
        lines.extend(client_saturation_lines(a.rungs))
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
        f"p99 {client.lag_p99_ms or 0:.0f} ms > {client.lag_bound_ms or 0:.0f} ms, CPU "
        f"{(client.cpu_share or 0) * 100:.0f}%); it kept time up to {kept}: measure higher "
        "concurrency from more client processes"
    ]


def iso_ns(epoch_ns: int) -> str:
    return iso(from_epoch_ns(epoch_ns))


def describe_schedule(settings: ResolvedOptions) -> list[str]:
    """The --dry-run output: what would run and for how long, before any refinement."""
    estimate = schedule_estimate_s(settings.ladder, settings.hold_s, settings.gap_s)
    run = settings.run
    lines = [
        f"qmax dry run: {run.kind} endpoint {run.endpoint or run.endpoint_url or '(local default)'}"
        f", transport {run.transport}, SLO p95 TTFAB <= {settings.slo_ms:g} ms",
        f"ladder {','.join(map(str, settings.ladder))}: hold {settings.hold_s:g} s (last "
        f"{settings.measure_s:g} s measured), gap {settings.gap_s:g} s, runs {run.runs}",
    ]
    elapsed = 0.0
    for index, concurrency in enumerate(settings.ladder):
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
        f"{MAX_EXTENSIONS} extra measure windows per inconclusive rung and bisection rungs after "
        "the first failure; the ladder stops after two failing rungs"
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


def check_admission_bound(endpoint: Endpoint, top_rung: int, allow: bool) -> None:
    """Refuse a ladder that climbs above the container's admission bound (SPEC §4), whether
    it was deployed (QUEUE_MAX_DEPTH) or named by the endpoint's own 503 answers."""
    bound = endpoint.queue_max_depth
    if bound is not None and bound < top_rung and not allow:
        raise InputError(
            f"the admission bound of {endpoint.name} is {bound} ({endpoint.queue_max_depth_source})"
            f", below the top rung {top_rung}: rungs above it would only measure the admission "
            f"gate; expected a bound >= {top_rung} (redeploy unbounded, lower --ladder, or pass "
            "--allow-shallow-queue)"
        )


def run_ladder(
    endpoint: Endpoint,
    settings: ResolvedOptions,
    *,
    progress: Progress,
    workload: Workload | None = None,
) -> LadderResult:
    run = settings.run
    workload = workload or workload_for(run, endpoint.kind)
    check_admission_bound(endpoint, max(settings.ladder), run.allow_shallow_queue)
    stall_s = stall_bound_s(settings.slo_ms)

    def probe_request(worker: int, seq: int) -> RequestSpec:
        return workload.request(1, worker, seq)

    health = require_answer(endpoint, run.transport, probe_request, stall_s=stall_s)
    check_admission_bound(endpoint, max(settings.ladder), run.allow_shallow_queue)
    path = run.artifacts_dir / qmax_filename(run.model, run.transport, endpoint.slug)
    records_path = path.with_name(path.stem + ".requests.jsonl")
    inputs_path = path.with_name(path.stem + ".inputs.jsonl")
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
    budget = run.runs * schedule_estimate_s(settings.ladder, settings.hold_s, settings.gap_s)

    def artifact(rungs: list[Rung], complete: bool, stop_reason: str | None) -> QmaxArtifact:
        q_max, bracketed = select_qmax(rungs)
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
                "ladder": list(settings.ladder),
                "hold_s": settings.hold_s,
                "measure_s": settings.measure_s,
                "gap_s": settings.gap_s,
                "runs": run.runs,
                "texts": len(workload.texts),
                "voices": list(workload.voices),
                "format": workload.format,
            },
            runs_q_max=[select_qmax(r)[0] for r in runs],
            admission_bound=endpoint.queue_max_depth,
            admission_bound_source=endpoint.queue_max_depth_source,
            probe=health.summary(),
        )

    def stop(rungs: list[Rung], reason: str, error: Exception) -> NoReturn:
        """End the run early: the rungs measured so far stay in the artifact, marked incomplete."""
        save(artifact(rungs, complete=False, stop_reason=reason), path)
        raise error

    measured = 0
    for run_index in range(1, run.runs + 1):
        rungs: list[Rung] = []
        runs.append(rungs)
        while (concurrency := next_concurrency(settings.ladder, rungs)) is not None:
            if measured:
                time.sleep(settings.gap_s)
            rung, heard = _measure_rung(
                endpoint, settings, workload, concurrency, records_path, inputs_path
            )
            seen = silence_after(endpoint, heard, run.transport, probe_request, stall_s=stall_s)
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
            rung = rung.model_copy(
                update={
                    "run": run_index,
                    "phase": "ladder" if concurrency in settings.ladder else "refine",
                }
            )
            rungs.append(rung)
            measured += 1
            if rung.client is not None:
                rung.client.kept_time_up_to = max(
                    (r.concurrency for r in rungs if r.unusable_reason != "client_saturated"),
                    default=None,
                )
            save(artifact(rungs, complete=False, stop_reason="measuring"), path)
            elapsed = time.monotonic() - started
            progress(_progress_line(rung, settings.slo_ms, elapsed, max(0.0, budget - elapsed)))
            try:
                check_admission_bound(endpoint, max(settings.ladder), run.allow_shallow_queue)
            except InputError as exc:
                stop(rungs, f"refused: {exc}", exc)
    final = min(runs, key=lambda r: select_qmax(r)[0] or 0)
    endpoint.thaw()  # the load has stopped: restore the endpoint before the CloudWatch join
    annotated = endpoint.annotate_rungs(final)
    result = artifact(annotated, complete=True, stop_reason=None)
    save(result, path)
    return LadderResult(artifact=result, path=path, records_path=records_path)


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _measure_rung(
    endpoint: Endpoint,
    settings: ResolvedOptions,
    workload: Workload,
    concurrency: int,
    records_path: Path,
    inputs_path: Path,
) -> tuple[Rung, RungRun]:
    """The judged rung and what the engine heard during it."""
    before = endpoint.instance_count()
    inputs: list[dict[str, object]] = []

    def make_request(worker: int, seq: int) -> RequestSpec:
        spec = workload.request(concurrency, worker, seq)
        inputs.append(
            {
                "request_id": spec.request_id,
                "rung": concurrency,
                "worker": worker,
                "seq": seq,
                "text": spec.text,
                "voice": spec.voice,
                "component": spec.component,
                "payload_bytes": len(spec.payload),
            }
        )
        return spec

    async def measure() -> RungRun:
        async with endpoint.transport(settings.run.transport, concurrency=concurrency) as transport:
            return await run_rung(
                transport,
                make_request,
                concurrency=concurrency,
                hold_s=settings.hold_s,
                measure_s=settings.measure_s,
                should_extend=lambda window: straddles_slo(window, settings.slo_ms),
                max_extensions=MAX_EXTENSIONS,
                stall_s=stall_bound_s(settings.slo_ms),
            )

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
            window=result.in_window(),
            measure_s=result.measure_s,
            concurrency_mean=mean,
            concurrency_max=peak,
            instance_count_changed=before != after,
            instance_count=after,
            window_start=iso_ns(result.window_start_ns + result.epoch_offset_ns),
            window_end=iso_ns(result.window_end_ns + result.epoch_offset_ns),
            client_lag_p99_ms=result.client.lag_p99_ms,
            client_lag_bound_ms=lag_bound,
        ),
        settings.slo_ms,
    )
    client = result.client.model_copy(update={"lag_bound_ms": lag_bound})
    return rung.model_copy(update={"extensions": result.extensions, "client": client}), result


def _record_row(record: RequestRecord, result: RungRun) -> dict[str, object]:
    row = record.to_json()
    row["in_window"] = result.window_start_ns <= record.end_ns <= result.window_end_ns
    return row


def _progress_line(rung: Rung, slo_ms: float, elapsed_s: float, left_s: float) -> str:
    p95 = rung.ttfab_ms.p95
    verdict = (
        f"unusable ({rung.unusable_reason})"
        if not rung.usable
        else "pass"
        if rung.meets_slo
        else "FAIL"
    )
    p95_text = "n/a" if p95 is None else f"{p95:.0f} ms"
    return (
        f"qmax N={rung.concurrency:<4} {rung.phase:<6} p95 TTFAB {p95_text} (SLO {slo_ms:g}) "
        f"{verdict}; {rung.completed} done, {rung.throughput_rps:.2f} rps, in-flight "
        f"{rung.concurrency_mean:.2f}; elapsed {_mmss(elapsed_s)}, about {_mmss(left_s)} left"
    )


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
