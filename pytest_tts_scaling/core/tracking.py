"""What one step's run holds in an experiment tracker (MLflow): parameters, metrics, tags.

Pure: an artifact in, a :class:`RunRecord` out; the tracking adapter sends it. Per-rung figures
are read off each rung generically (every summary's p50 and p95, every number, every count by
kind), so a field the artifact gains is recorded without a change here. Metric names keep to
what MLflow accepts (letters, digits, ``_ - . / `` and spaces).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_tts_scaling.core.schema import (
    PlanArtifact,
    Provenance,
    QmaxArtifact,
    Stage,
    TtotalArtifact,
)

# Tags every run carries, so runs are found by step and verdict (a baseline is the latest pass).
STEP_TAG = "tts.step"
VERDICT_TAG = "tts.verdict"
PASS = "pass"
# A parameter value is cut to this many characters: older tracking servers keep no more.
PARAM_LIMIT = 500
SUMMARY_QUANTILES = ("p50", "p95")
_UNSAFE = re.compile(r"[^\w\-. /]")


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    step: int = 0


@dataclass
class RunRecord:
    """One run: parameters (what was asked and measured on), metrics, tags."""

    params: dict[str, str] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)

    def param(self, key: str, value: object) -> None:
        if value is None:
            return
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        self.params[metric_key(key)] = text[:PARAM_LIMIT]

    def params_of(self, values: Mapping[str, object], prefix: str = "") -> None:
        for key, value in values.items():
            self.param(f"{prefix}{key}", value)

    def fields_of(self, model: object, *names: str) -> None:
        """These fields of an artifact's part as parameters of the same names."""
        for name in names:
            self.param(name, getattr(model, name))

    def metric(self, key: str, value: object, step: int = 0) -> None:
        number = as_number(value)
        if number is not None:
            self.metrics.append(Metric(metric_key(key), number, step))


@dataclass(frozen=True)
class Verdict:
    """The step's verdict (pass, inconclusive or fail) and the reasons that are not a plain pass."""

    word: str
    reasons: tuple[str, ...] = ()


def metric_key(key: str) -> str:
    return _UNSAFE.sub("_", key)


def as_number(value: object) -> float | None:
    """A number or a bool (1/0) as a float; None for anything else."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    return None


def numbers(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every number in a nested mapping, keyed by its dotted path; lists are left out."""
    for key, value in data.items():
        if isinstance(value, Mapping):
            yield from numbers(value, f"{prefix}{key}.")
        elif (number := as_number(value)) is not None:
            yield f"{prefix}{key}", number


def rung_metrics(rung: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    """A rung's figures: each summary's p50 and p95 (`ttfab_ms.p95`), each number, counts by
    kind (`errors_by_kind.http_500`) and the client's timing numbers."""
    for name, value in rung.items():
        if name in ("concurrency", "run"):
            continue
        if isinstance(value, Mapping) and "p95" in value:
            for quantile in SUMMARY_QUANTILES:
                if (number := as_number(value.get(quantile))) is not None:
                    yield f"{name}.{quantile}", number
        elif isinstance(value, Mapping):
            yield from numbers(value, f"{name}.")
        elif (number := as_number(value)) is not None:
            yield name, number


def _new_record(
    step: str, verdict: Verdict, model: str, slug: str, provenance: Provenance | None
) -> RunRecord:
    """A run's record with what every step's run holds: step, verdict, model, fingerprint."""
    record = RunRecord()
    record.tags[STEP_TAG] = step
    record.tags[VERDICT_TAG] = verdict.word
    if verdict.reasons:
        record.tags["tts.reasons"] = "; ".join(verdict.reasons)[:5000]
    record.param("step", step)
    record.param("model", model)
    record.param("slug", slug)
    if provenance is not None:
        record.param("tool_version", provenance.tool_version)
        record.param("artifact_run_id", provenance.run_id)
        record.param("measured_at", provenance.measured_at)
    return record


def _scalars(record: RunRecord, dumped: Mapping[str, Any], prefix: str = "") -> None:
    """The top-level numbers (and bools) of an artifact as metrics, whatever fields it has."""
    for key, value in dumped.items():
        record.metric(f"{prefix}{key}", value)


def qmax_record(artifact: QmaxArtifact, verdict: Verdict) -> RunRecord:
    """The qmax run: Q_max and the per-rung figures (step = N), the settings and fingerprint."""
    a = artifact
    record = _new_record("qmax", verdict, a.model, a.slug, a.provenance)
    record.fields_of(a, "endpoint", "transport", "slo_ms", "slo_metric")
    record.fields_of(a.deployed_config, "instance_type", "image_digest", "weights")
    record.params_of(dict(sorted(a.deployed_config.container_env.items())), "container_env.")
    record.params_of(dict(sorted(a.settings.items())), "settings.")
    if a.host is not None:
        record.param("host.cpu_model", a.host.cpu_model)
        record.param("host.cpu_count", a.host.cpu_count)

    dumped = a.model_dump(mode="json", by_alias=True)
    _scalars(record, dumped)
    record.metric("rungs", len(a.rungs))
    record.metric("inconclusive_rungs", len(a.inconclusive))
    errors: dict[str, int] = {}
    for rung, raw in zip(a.rungs, dumped["rungs"], strict=True):
        for key, number in rung_metrics(raw):
            record.metric(f"rung.{key}", number, step=rung.concurrency)
        for kind, count in rung.errors_by_kind.items():
            errors[kind] = errors.get(kind, 0) + count
    for kind, count in sorted(errors.items()):
        record.metric(f"errors.{kind}", count)
    at_qmax = next((r for r in a.rungs if r.concurrency == a.q_max), None)
    if at_qmax is not None:
        record.metric("throughput_rps_at_qmax", at_qmax.throughput_rps)
        record.metric("audio_throughput_at_qmax", at_qmax.audio_throughput)
    record.metric("throughput_rps_max", max((r.throughput_rps for r in a.rungs), default=None))
    return record


def ttotal_record(artifact: TtotalArtifact, verdict: Verdict, stages: list[Stage]) -> RunRecord:
    """The ttotal run: T_total, its measured part and policy lag, and each stage's seconds
    since desired_set (`stages`: the artifact's, timed where it holds only their times)."""
    a = artifact
    record = _new_record("ttotal", verdict, a.model, a.slug, a.provenance)
    record.fields_of(a, "transport", "trigger", "policy_lag_source", "qmax_run_id", "weights")
    if a.dominant_stage:
        record.tags["tts.dominant_stage"] = a.dominant_stage
    _scalars(record, a.model_dump(mode="json", by_alias=True))
    for key, number in numbers(a.probe, "probe."):
        record.metric(key, number)
    for stage in stages:
        record.metric(f"stage.{stage.stage}.elapsed_s", stage.elapsed_s)
        record.metric(f"stage.{stage.stage}.share", stage.share)
    return record


def plan_record(plan: PlanArtifact, verdict: Verdict) -> RunRecord:
    """The plan run: thresholds, cooldowns, fleet and the policy, with each finding's verdict;
    each instance type it weighed by cost (`candidate.SLUG.cost_per_day` …)."""
    record = _new_record("plan", verdict, plan.model, plan.slug, None)
    record.param("instance_type", plan.instance_type)
    inputs = plan.inputs.model_dump(mode="json")
    for key, value in inputs.items():
        if not isinstance(value, Mapping):
            record.param(f"inputs.{key}", value)
    for ref in ("qmax_artifact", "ttotal_artifact"):
        if isinstance(inputs.get(ref), Mapping):
            record.param(f"inputs.{ref}.run_id", inputs[ref].get("run_id"))
            record.param(f"inputs.{ref}.file", inputs[ref].get("file"))
    record.tags["tts.plan_verdict"] = plan.verdict
    for finding in plan.findings:
        record.tags[metric_key(f"tts.finding.{finding.name}")] = finding.verdict
    dumped = plan.model_dump(mode="json", by_alias=True)
    _scalars(record, dumped)
    if isinstance(dumped.get("policy"), Mapping):
        _scalars(record, dumped["policy"], "policy.")
    for candidate in plan.candidates or ():
        # Each instance type weighed: its fleet and costs, and whether it was chosen.
        prefix = f"candidate.{candidate.slug}."
        _scalars(record, candidate.model_dump(mode="json"), prefix)
        record.tags[metric_key(f"tts.{prefix}why")] = candidate.why[:5000]
    return record
