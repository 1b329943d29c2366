"""The artifact contract (docs/artifacts.md): one definition, read by the plugin, the CLI and infra.

Users commit these files and CDK reads them, so fields are only ever added. The models are
pure data (pydantic); reading and writing files lives in :mod:`pytest_tts_scaling.artifacts`.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

QMAX_SCHEMA: Final = "tts-scaling/qmax/1"
TTOTAL_SCHEMA: Final = "tts-scaling/ttotal/1"
PLAN_SCHEMA: Final = "tts-scaling/plan/2"
# Plans before they stored their curve and policy; still read (their drawings recompute them).
PLAN_SCHEMA_V1: Final = "tts-scaling/plan/1"

Transport = Literal["response-stream", "bidi"]
# The clock the SLO holds (docs/method.md#the-listeners-clocks): first audio byte, first audible
# speech as it plays, or glitch-free playback.
SloMetric = Literal["ttfab", "audible", "playback"]
# How each clock is named where a verdict is put in words.
CLOCK_WORDS: Final[dict[str, str]] = {
    "ttfab": "TTFAB",
    "audible": "first audible speech",
    "playback": "glitch-free playback",
}
Verdict = Literal["ok", "warn", "stop"]


class _Model(BaseModel):
    # Unknown fields survive a read-modify-write, so newer tools' fields are not lost.
    model_config = ConfigDict(extra="allow", frozen=False)


class Summary(_Model):
    """Distribution of one per-request metric (docs/method.md), computed by :func:`stats.summarize`.

    The artifact format requires the moments and quantiles, not `count`: a summary read without one
    has
    count None (a rung fills it in from its completed requests).
    """

    count: int | None = Field(default=None, ge=0)
    mean: float | None
    min: float | None
    max: float | None
    std: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None


class Interval(_Model):
    """A two-sided confidence interval; open above when the data cannot bound it from above.

    Open above, `high` is the largest value seen and the interval is [low, ∞).
    """

    low: float
    high: float
    level: float = 0.95
    bounded_above: bool = True


class DeployedConfig(_Model):
    instance_type: str
    image_digest: str
    container_env: dict[str, str] = Field(default_factory=dict)
    # Which weights served (the container's X-TTS-Weights): "trained (int8-derived v1.0)",
    # "trained (model dir)", "untrained (development)" or "synthetic". None in older artifacts.
    weights: str | None = None

    @property
    def synthetic_engine(self) -> bool:
        """The container ran its synthetic engine: a cost model, no model at all."""
        return self.container_env.get("ENGINE") == "synthetic"

    @property
    def development_model(self) -> bool:
        """The untrained development model served: the weights say so; an older artifact's local
        container given no model directory served it (the default then)."""
        if self.weights is not None:
            return self.weights.startswith("untrained")
        return (
            self.instance_type == "local"
            and "MODEL_DIR" not in self.container_env
            and not self.synthetic_engine
        )


class Host(_Model):
    """The machine a local run measured on: the server and the client share it."""

    cpu_model: str
    cpu_count: int = Field(ge=1)
    gpu: str | None = None
    load_avg_1m: float | None = None
    server_cores: list[int] = Field(default_factory=list)
    client_cores: list[int] = Field(default_factory=list)
    cores_shared: bool = True


class Provenance(_Model):
    origin: str
    run_id: str
    measured_at: str
    tool_version: str
    git_commit: str | None = None


class ClientTiming(_Model):
    """The load client's own timekeeping over a measure window (client honesty).

    `lag_*`: how late the client's event loop woke a 5 ms ticker; every timestamp the loop
    takes itself is late by about as much (over plain HTTP, pieces carry the kernel's arrival
    stamp instead). `cpu_share`: the loop
    thread's CPU time over wall time (1.0 = the client had no time to spare).
    `kept_time_up_to`: the highest concurrency of this run at which the client kept time.
    """

    ticks: int = Field(ge=0)
    lag_p50_ms: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    cpu_share: float | None = None
    lag_bound_ms: float | None = None
    kept_time_up_to: int | None = None
    # Garbage collections during the window: how many, how many walked the whole heap, and
    # the longest pause (the engine keeps full collections out of rungs).
    gc_collections: int = Field(default=0, ge=0)
    gc_full_collections: int = Field(default=0, ge=0)
    gc_max_ms: float | None = None
    # p99 over the window's requests of how late the loop may have been when their first audio
    # was read: bursts of answers meet a late loop more often than the ticker does.
    first_audio_lag_p99_ms: float | None = None

    @property
    def worst_lag_p99_ms(self) -> float | None:
        """The larger of the ticker's and the first audio's lag p99: what the verdict holds."""
        known = [v for v in (self.lag_p99_ms, self.first_audio_lag_p99_ms) if v is not None]
        return max(known) if known else None


class Rung(_Model):
    """One concurrency level of the ladder and its verdict."""

    @model_validator(mode="after")
    def _counts_from_completed(self) -> Rung:
        """A rung read without counts (the format leaves them optional): one per completed
        request."""
        for summary in (self.ttfab_ms, self.latency_ms):
            if summary.count is None:
                summary.count = self.completed
        return self

    concurrency: int = Field(ge=1)
    usable: bool
    unusable_reason: str | None
    meets_slo: bool
    completed: int = Field(ge=0)
    rejected: int = Field(ge=0)
    measure_s: float = Field(ge=0)
    throughput_rps: float = Field(ge=0)
    concurrency_mean: float = Field(ge=0)
    ttfab_ms: Summary
    latency_ms: Summary
    cw_ratio: float | None = None
    # Beyond the minimum contract: what the verdicts and later steps use.
    failed: int = Field(default=0, ge=0)
    concurrency_max: float | None = None
    ttfab_p95_ci_ms: Interval | None = None
    inter_chunk_gap_ms: Summary | None = None
    underrun_ms: Summary | None = None
    audio_s: Summary | None = None
    response_bytes: Summary | None = None
    # Real-time factor: request wall time / audio seconds (below 1: faster than real time).
    rtf: Summary | None = None
    audio_throughput: float | None = None
    phase: Literal["ladder", "refine", "search", "remeasure", "retest", "confirm"] = "ladder"
    extensions: int = Field(default=0, ge=0)
    # The window ended before its time: what it held was already a clear failure.
    ended_early: bool = False
    run: int = Field(default=1, ge=1)
    window_start: str | None = None
    window_end: str | None = None
    cw_max: float | None = None
    # The CloudWatch period cw_max was read at: 10 s while CloudWatch holds it (3 h), then 60/300.
    cw_period_s: int | None = None
    instance_count: int | None = None
    client: ClientTiming | None = None
    # Goodput: every request started in the window counts.
    # `slo` (p95 above the SLO), `errors` (more than 1% of requests ended without audio) or `wer`
    # (the quality SLO: --max-wer, --max-wer-increase).
    fail_reason: str | None = None
    # Requests of the window that ended without audio, by kind (`no_audio`, `http_500`, …).
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    # Requests of the window cut after waiting the stall bound for their answer's body while the
    # endpoint answered others: slow (above the SLO in the p95), not errors.
    waited_past_bound: int = Field(default=0, ge=0)
    # Delivered requests of the window the listener hung up on (a scenario's [listener] table):
    # served, their TTFAB in the goodput; latency and RTF are of the answers heard to the end.
    hung_up: int = Field(default=0, ge=0)
    # p95 TTFAB with every request that ended without audio counted above the SLO.
    goodput_ttfab_p95_ms: float | None = None
    # Earlier measurements of this concurrency that this one replaced, and what they showed
    # (`unusable:not_settled`, `fail:slo`, …): an unusable rung is measured again, and a single
    # doubtful failure is re-tested before it caps Q_max.
    remeasured: int = Field(default=0, ge=0)
    earlier: list[str] = Field(default_factory=list)
    # Time to first audible audio: the first chunk above the endpoint's silence level at N=1
    # (TTFAB is still the first audio byte); None without a reference or an audible one.
    audible_ms: Summary | None = None
    # With --wer-sample: the word error rate of a few of the rung's answers against their texts,
    # the same texts' WER at N=1, and how many answers were transcribed.
    wer: float | None = None
    wer_at_c1: float | None = None
    wer_sampled: int = Field(default=0, ge=0)
    # The host's 1-minute load average when the rung ended (a local run shares its host).
    load_avg_1m: float | None = None
    # Fewer completions than a p95 needs (ladder.MIN_COMPLETIONS), even after extending.
    few_samples: bool = False
    # The listener's clocks (docs/method.md#the-listeners-clocks): when the first audible sample
    # plays (a player starting at the first audio byte, waiting whenever it runs dry), and the
    # earliest start from which playback never runs dry. None where they could not be timed.
    speech_ms: Summary | None = None
    glitch_free_ms: Summary | None = None
    # Throughput in speech units: characters of delivered texts per second of the window
    # (audio seconds per second is `audio_throughput`).
    chars_per_s: float | None = None
    # The clock the verdict held to the SLO and, where it is not TTFAB, the goodput p95 and its
    # interval on that clock (for TTFAB they are goodput_ttfab_p95_ms and ttfab_p95_ci_ms).
    slo_metric: SloMetric = "ttfab"
    slo_p95_ms: float | None = None
    slo_p95_ci_ms: Interval | None = None

    @property
    def judged_ms(self) -> Summary | None:
        """The delivered requests' times on the SLO's clock."""
        return {
            "ttfab": self.ttfab_ms,
            "audible": self.speech_ms,
            "playback": self.glitch_free_ms,
        }[self.slo_metric]

    @property
    def judged_p95_ms(self) -> float | None:
        """The p95 the verdict used: goodput on the SLO's clock where recorded."""
        if self.slo_metric != "ttfab":
            return self.slo_p95_ms
        if self.goodput_ttfab_p95_ms is not None:
            return self.goodput_ttfab_p95_ms
        return self.ttfab_ms.p95

    @property
    def judged_ci_ms(self) -> Interval | None:
        """The confidence interval of :attr:`judged_p95_ms`."""
        return self.ttfab_p95_ci_ms if self.slo_metric == "ttfab" else self.slo_p95_ci_ms


class AudioReferenceSummary(_Model):
    """The reference the audio checks judged against: the endpoint's own answers at N=1."""

    texts: int = Field(ge=0)
    silence_level: int = Field(ge=0)
    # False: no reference answer rose above its silence level, so none is judged silent.
    audible: bool
    tolerance: float = Field(ge=0, le=1)


class Confirmation(_Model):
    """The answer's passing rung measured once more, last: is the server still the one measured?

    `held`: it passes as before. `slowed`: it passes, slower beyond both p95 intervals (the
    failure above it, measured on a faster server, holds a fortiori). `changed`: its p95 moved
    beyond both intervals otherwise (it fails now, or the server got faster): the pair came from
    two servers. `not_repeated`: it failed or was unusable with no such move: the pass did not
    repeat.
    """

    concurrency: int = Field(ge=1)
    outcome: Literal["held", "slowed", "changed", "not_repeated"]
    before_p95_ms: float | None
    rung: Rung


class SloTier(_Model):
    """Q_max at one of several SLOs bracketed by one run (--slo-ms 1000,2000,3000)."""

    slo_ms: float = Field(gt=0)
    q_max: int | None
    q_max_bracketed: bool
    inconclusive: list[int] = Field(default_factory=list)


class QmaxArtifact(_Model):
    schema_: Literal["tts-scaling/qmax/1"] = Field(alias="schema", default=QMAX_SCHEMA)
    model: str
    endpoint: str
    transport: Transport
    slug: str
    deployed_config: DeployedConfig
    slo_ms: float = Field(gt=0)
    q_max: int | None
    q_max_bracketed: bool
    s_mean_s: float | None
    s_p95_s: float | None
    ttfab_p95_at_c1_ms: float | None
    frozen: bool
    unbounded_queue: bool
    rungs: list[Rung]
    provenance: Provenance
    complete: bool = True
    stop_reason: str | None = None
    records_file: str | None = None
    inputs_file: str | None = None
    settings: dict[str, object] = Field(default_factory=dict)
    runs_q_max: list[int | None] = Field(default_factory=list)
    # The endpoint's admission bound and where it was read (the deployed QUEUE_MAX_DEPTH, or
    # `max_queue_depth` in its own 503 answers); the health probe before rung 1.
    admission_bound: int | None = None
    admission_bound_source: str | None = None
    probe: dict[str, object] = Field(default_factory=dict)
    host: Host | None = None
    # Rungs whose p95 TTFAB fell below a lower rung's beyond both intervals (a changing host).
    non_monotonic: list[int] = Field(default_factory=list)
    # What the answers at N=1 set for the audio checks (audio_short, audio_silent, audible time).
    audio_reference: AudioReferenceSummary | None = None
    # Rungs the verdict rests on (the Q_max rung, the failure above it; with no Q_max the lowest)
    # whose p95 interval still held the SLO after their extensions: the answer is inconclusive.
    # Absent from artifacts written before it was kept (read as none).
    inconclusive: list[int] = Field(default_factory=list)
    # The clock the SLO held (older artifacts: TTFAB), and throughput in speech units at Q_max.
    slo_metric: SloMetric = "ttfab"
    chars_per_s_at_q_max: float | None = None
    audio_s_per_s_at_q_max: float | None = None
    # With several SLOs: Q_max at each, ascending, from the same rungs (the last is slo_ms's).
    slo_tiers: list[SloTier] = Field(default_factory=list)
    # The Q_max rung measured once more at the end (None: not asked for, or nothing to confirm).
    confirmation: Confirmation | None = None

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Stage(_Model):
    """One point of the scale-out timeline, with where it was read from."""

    stage: str
    at: str
    bounded: bool
    source: str
    elapsed_s: float | None = None
    share: float | None = None


class TtotalArtifact(_Model):
    schema_: Literal["tts-scaling/ttotal/1"] = Field(alias="schema", default=TTOTAL_SCHEMA)
    model: str
    slug: str
    transport: Transport
    trigger: str
    t_measured_s: float = Field(ge=0)
    policy_lag_bound_s: float = Field(ge=0)
    t_total_s: float = Field(ge=0)
    bounded: bool
    stages: list[Stage]
    provenance: Provenance
    dominant_stage: str | None = None
    policy_lag_source: str | None = None
    probe: dict[str, object] = Field(default_factory=dict)
    missing_stages: list[str] = Field(default_factory=list)
    out_of_order_stages: list[str] = Field(default_factory=list)
    qmax_run_id: str | None = None
    # The weights that served the scale-out, from the qmax run it extends; None in older artifacts.
    weights: str | None = None

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Finding(_Model):
    name: str
    verdict: Verdict
    detail: str
    # None where there is nothing to recommend (the field is required, its value is not).
    recommendation: str | None = None


class ArtifactRef(_Model):
    """Which artifact a plan was computed from: its file name, run and what it measured."""

    file: str | None = None
    run_id: str | None = None
    slug: str | None = None
    transport: str | None = None
    # The weights that served it (a qmax or ttotal artifact's); None where it did not say.
    weights: str | None = None


def _absent(value: object) -> bool:
    """Fields added after a plan's bytes were fixed are left out when unset, so a plan that does
    not use them keeps its bytes."""
    return value is None


class PlanPrices(_Model):
    """Where a plan's instance prices came from: the file and what it says of itself."""

    file: str | None = None
    currency: str
    region: str | None = None
    as_of: str | None = None
    source: str | None = None


class PlanCandidate(_Model):
    """One instance type the plan weighed: its fleet, policy and cost for the given traffic, and
    whether it was chosen or why it lost. Costs are per instance hour x instances."""

    instance_type: str
    slug: str
    qmax_artifact: ArtifactRef
    ttotal_artifact: ArtifactRef
    q_max: int
    per_instance_rps_at_c_scale_max: float
    t_total_s: float
    # The fleet at trough and at peak.
    min_instances: int
    max_instances: int
    policy: PlanPolicy
    verdict: Verdict
    # The stop findings that disqualify it (the SLO and the surge rule), if any.
    stops: list[str] = Field(default_factory=list)
    price_per_hour: float
    cost_per_hour_at_peak: float
    cost_per_hour_at_trough: float
    # A simulated day of the given traffic under the candidate's policy.
    instance_hours_per_day: float
    cost_per_day: float
    requests_served_per_day: float
    shed_fraction_per_day: float
    # Mean seconds of audio per answer the ladder measured (None where it did not record it).
    audio_s_per_request: float | None = None
    cost_per_audio_hour: float | None = None
    chosen: bool
    why: str


class PlanInputsRecord(_Model):
    """What the plan was asked for and computed from. Every field is optional so a schema 1
    plan's free-form inputs read into it; a plan `tts-bench plan` writes has them all."""

    slo_ms: float | None = None
    surge_ratio: float | None = None
    peak_rps: float | None = None
    trough_rps: float | None = None
    min_floor: int | None = None
    allow_config_mismatch: bool | None = None
    qmax_artifact: ArtifactRef | None = None
    ttotal_artifact: ArtifactRef | None = None
    # Requests per second for each hour of a day (--hourly-rps), when the day was given; the price
    # file the candidates were weighed with (--prices). Absent, not null, when not given.
    hourly_rps: list[float] | None = Field(default=None, exclude_if=_absent)
    prices: PlanPrices | None = Field(default=None, exclude_if=_absent)


class PlanCurve(_Model):
    """The per-instance service curve the plan was decided on (client concurrency units)."""

    concurrency: list[float]
    throughput_rps: list[float]
    ttfab_p95_ms: list[float]


class PlanPolicy(_Model):
    """The autoscaling policy the plan decided, as its fleet simulation ran it."""

    target_concurrency: float
    scale_in_concurrency: float
    min_instances: int
    max_instances: int
    scale_out_cooldown_s: float
    scale_in_cooldown_s: float
    provision_s: float
    queue_max_depth: int | None
    period_s: float
    scale_out_periods: int
    scale_in_periods: int


class PlanArtifact(_Model):
    schema_: Literal["tts-scaling/plan/2", "tts-scaling/plan/1"] = Field(
        alias="schema", default=PLAN_SCHEMA
    )
    model: str
    slug: str
    inputs: PlanInputsRecord
    c_scale_max: float
    c_scale_min: float
    cw_units_ratio: float
    scaling_target_value: float
    scale_in_threshold: float
    w_max_s: float
    queue_max_depth: int
    scale_out_cooldown_s: int
    scale_in_cooldown_s: int
    min_instances: int
    max_instances: int
    min_safe_instances: int
    per_instance_rps_at_c_scale_max: float
    first_chunk_alarm_ms: float
    findings: list[Finding]
    verdict: Verdict
    config_block: str
    # Optional (a minimal plan has none): what the report and the registry
    # entry read, declared so nothing reads them by name.
    instance_type: str | None = None
    t_total_s: float | None = None
    knee_concurrency: float | None = None
    surge_simulation: dict[str, Any] | None = None
    # Plan schema 2: what the plan was decided from, so a report or validate_live draws and
    # checks it without the qmax and ttotal artifacts (None in a schema 1 plan).
    service_curve: PlanCurve | None = None
    policy: PlanPolicy | None = None
    surge_instances: int | None = None
    # Every instance type weighed by cost (--prices), the chosen one among them; the fields above
    # are the chosen candidate's plan. Absent from a plan of one unpriced candidate.
    candidates: list[PlanCandidate] | None = Field(default=None, exclude_if=_absent)

    model_config = ConfigDict(extra="allow", populate_by_name=True)


ARTIFACT_MODELS: dict[str, type[_Model]] = {
    QMAX_SCHEMA: QmaxArtifact,
    TTOTAL_SCHEMA: TtotalArtifact,
    PLAN_SCHEMA: PlanArtifact,
    PLAN_SCHEMA_V1: PlanArtifact,
}


def qmax_filename(model: str, transport: str, slug: str) -> str:
    return f"qmax-{model}-{transport}-{slug}.json"


def ttotal_filename(model: str, trigger: str, slug: str) -> str:
    return f"ttotal-{model}-{trigger}-{slug}.json"


def plan_filename(model: str) -> str:
    return f"plan-{model}.json"


def slug_for(instance_type: str, image_digest: str) -> str:
    """`ml.g5.xlarge` + `sha256:8b1b96bc…` → `g5xlarge-8b1b96bc` (docs/artifacts.md)."""
    kind = instance_type.removeprefix("ml.").replace(".", "")
    digest = image_digest.split(":", 1)[-1]
    return f"{kind}-{digest[:8]}"
