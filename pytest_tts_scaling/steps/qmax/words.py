"""What a qmax run says: its verdict, what makes it less trustworthy, its schedule and progress.

Words only: each function reads an artifact, a rung or the settings and returns lines, so the
command, the scenario and the summary say the same thing.
"""

from __future__ import annotations

from pytest_tts_scaling.core.confirm import confirmation_line
from pytest_tts_scaling.core.schema import CLOCK_WORDS, QmaxArtifact, Rung, SloTier
from pytest_tts_scaling.core.search import Step, schedule_estimate_s, worst_case_rungs
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.core.verdicts import (
    MAX_MEASUREMENTS,
    doubt_line,
    verdict_words,
)
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from pytest_tts_scaling.steps.qmax.rung import MIN_COMPLETIONS, MOST_EXTENSIONS, mmss


def client_saturation_lines(rungs: list[Rung]) -> list[str]:
    """Where the client could not keep time, and up to which N it could."""
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
        "concurrency from more client processes (docs/method.md#the-clients-clock)"
    ]


def trust_lines(a: QmaxArtifact) -> list[str]:
    """What makes the numbers less trustworthy than they look: a busy host, thin rungs, a fall."""
    lines: list[str] = []
    if (doubt := doubt_line(a)) is not None:
        lines.append(doubt)
    if a.confirmation is not None and a.confirmation.outcome == "slowed":
        lines.append(str(confirmation_line(a.confirmation)))
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
            f"than their slowest request (use a longer {both_flags('--measure-s')})"
        )
    if a.non_monotonic:
        lines.append(
            f"qmax: p95 {CLOCK_WORDS[a.slo_metric]} fell at N="
            f"{', '.join(map(str, a.non_monotonic))} below a lower "
            "rung's, beyond both intervals: the host or the endpoint changed during the run; "
            "re-run it on a quiet machine"
        )
    return lines


def tier_words(artifact: QmaxArtifact, tier: SloTier) -> str:
    """One SLO tier's answer: `at p95 TTFAB <= 1000 ms: Q_max 4 (bracketed)`."""
    if tier.q_max is None:
        found = "no rung met it"
    else:
        found = f"Q_max {tier.q_max} ({'bracketed' if tier.q_max_bracketed else 'lower bound'})"
    doubt = ", INCONCLUSIVE" if tier.inconclusive else ""
    clock = CLOCK_WORDS[artifact.slo_metric]
    return f"at p95 {clock} <= {tier.slo_ms:g} ms: {found}{doubt}"


def no_qmax_message(artifact: QmaxArtifact) -> str:
    """Why no rung passed, naming errors apart from latency (a broken endpoint is not slow)."""
    if (confirmed := artifact.confirmation) is not None and confirmed.outcome == "changed":
        return str(confirmation_line(confirmed)).removeprefix("qmax: ")
    first = min(artifact.rungs, key=lambda r: r.concurrency, default=None)
    if first is not None and first.fail_reason == "errors":
        return f"{verdict_words(artifact)}: the endpoint answers without audio, it is not slow"
    p95 = first.judged_p95_ms if first is not None else None
    figure = "n/a" if p95 is None else f"{p95:.0f} ms"
    lowest = "none measured" if first is None else f"N={first.concurrency} p95 {figure}"
    if first is not None and not first.usable:
        lowest += f", unusable ({first.unusable_reason})"
    causes = [line.removeprefix("qmax: ") for line in trust_lines(artifact)]
    advice = "; ".join(causes) or (
        f"raise {both_flags('--slo-ms')}, or find out why one request alone is this slow"
    )
    clock = CLOCK_WORDS[artifact.slo_metric]
    return f"no rung met p95 {clock} <= {artifact.slo_ms:g} ms; lowest rung {lowest} ({advice})"


def describe_schedule(inputs: QmaxInputs) -> list[str]:
    """The --dry-run output: what would run and for how long, worst case included."""
    target, settings, runs = inputs.target, inputs.ladder, inputs.ladder.runs
    named = target.endpoint or target.endpoint_url or "(local default)"
    head = (
        f"qmax dry run: {target.kind} endpoint {named}"
        f", transport {inputs.workload.transport}, SLO p95 {CLOCK_WORDS[inputs.slo.metric]} <= "
        f"{', '.join(f'{t:g}' for t in inputs.slo.tiers_ms)} ms"
    )
    timing = (
        f"hold {settings.hold_s:g} s (last {settings.measure_s:g} s measured), gap "
        f"{settings.gap_s:g} s, runs {runs}"
    )
    longest_rung_s = settings.hold_s + MOST_EXTENSIONS * settings.measure_s
    if settings.concurrencies is None:
        rungs = worst_case_rungs(settings.max_concurrency)
        worst = rungs * MAX_MEASUREMENTS
        worst_s = runs * (worst * longest_rung_s + (worst - 1) * settings.gap_s)
        typical_s = runs * schedule_estimate_s((1, 2, 3, 4, 5), settings.hold_s, settings.gap_s)
        return [
            head,
            f"adaptive search up to N={settings.max_concurrency}: {timing}",
            "  rung 1: N=1; then the predicted SLO crossing and its neighbours, ending on "
            "N pass / N+1 fail"
            + (
                "" if settings.no_confirm else ", then N once more to confirm the server held still"
            ),
            f"estimate: about {typical_s / 60:.1f} min (4-6 rungs); worst case "
            f"{worst_s / 60:.1f} min: {rungs} concurrencies, each measured up to "
            f"{MAX_MEASUREMENTS} times (again when unusable, re-tested when a failure is "
            f"doubtful) and held up to {MOST_EXTENSIONS} extra measure windows",
        ]
    ladder = settings.concurrencies
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
        f"estimate: {runs * estimate / 60:.1f} min if every rung is climbed, plus up to "
        f"{MOST_EXTENSIONS} extra measure windows per inconclusive or sparse rung and bisection "
        "rungs after the first failure; the ladder stops after two failing rungs"
    )
    return lines


def again_line(step: Step, rungs: list[Rung], eta_s: float) -> str | None:
    """Before a concurrency is measured again: why (unusable, or a doubtful failure)."""
    earlier = next((r for r in rungs if r.concurrency == step.concurrency), None)
    if earlier is None:
        return None
    if not earlier.usable:
        why = f"it was unusable ({earlier.unusable_reason}), so it is measured again"
    else:
        why = (
            f"its failure ({earlier.fail_reason}) was doubtful, so it is re-tested before it caps "
            "Q_max"
        )
    return f"qmax N={step.concurrency} {step.phase}: {why}; run ETA {mmss(eta_s)}"


def progress_line(rung: Rung, slo_ms: float, elapsed_s: float, left_s: float) -> str:
    p95 = rung.judged_p95_ms
    verdict = (
        f"unusable ({rung.unusable_reason})"
        if not rung.usable
        else "pass"
        if rung.meets_slo
        else f"FAIL ({rung.fail_reason})"
    )
    p95_text = "n/a" if p95 is None else f"{p95:.0f} ms"
    errors = f", {rung.failed} without audio" if rung.failed else ""
    if rung.waited_past_bound:
        errors += f", {rung.waited_past_bound} waited past the stall bound"
    if rung.hung_up:
        errors += f", {rung.hung_up} hung up"
    again = f", measurement {rung.remeasured + 1}" if rung.remeasured else ""
    if rung.ended_early:
        again += f", ended early at {rung.measure_s:.1f} s (a clear failure)"
    return (
        f"qmax N={rung.concurrency:<4} {rung.phase:<9} p95 {CLOCK_WORDS[rung.slo_metric]} "
        f"{p95_text} (SLO {slo_ms:g} ms) "
        f"{verdict}; {rung.completed} done{errors}, {rung.throughput_rps:.1f} rps, in-flight "
        f"{rung.concurrency_mean:.1f}{again}; elapsed {mmss(elapsed_s)}, about {mmss(left_s)} "
        "left"
    )
