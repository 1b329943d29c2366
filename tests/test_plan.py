"""The plan: the source's worked example, every refusal, monotonicity and the findings."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_tts_scaling.artifacts import dump_json, load
from pytest_tts_scaling.core.plan import PlanInputs, compute_plan, overall_verdict, stored_outcome
from pytest_tts_scaling.core.schema import Finding, PlanArtifact, QmaxArtifact, Rung, TtotalArtifact
from pytest_tts_scaling.errors import ArtifactError, InputError, MismatchError

DATA = Path(__file__).resolve().parents[1] / "reports" / "examples" / "source"
QMAX_FILE = DATA / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"
TTOTAL_FILE = DATA / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"
PLAN_FILE = DATA / "plan-kokoro-82m.json"
SOURCE = PlanInputs(
    peak_rps=5000,
    trough_rps=10,
    min_floor=1,
    surge_ratio=1.25,
    qmax_name=QMAX_FILE.name,
    ttotal_name=TTOTAL_FILE.name,
)


def qmax(**update: object) -> QmaxArtifact:
    return load(QMAX_FILE, QmaxArtifact).model_copy(update=update)


def ttotal(**update: object) -> TtotalArtifact:
    return load(TTOTAL_FILE, TtotalArtifact).model_copy(update=update)


def inputs(**update: Any) -> PlanInputs:
    return dataclasses.replace(SOURCE, **update)


def plan(q: QmaxArtifact | None = None, t: TtotalArtifact | None = None, **kw: Any) -> PlanArtifact:
    return compute_plan(q or qmax(), t or ttotal(), inputs(**kw)).artifact


def finding(p: PlanArtifact, name: str) -> Finding:
    return next(f for f in p.findings if f.name == name)


def with_throughput(q: QmaxArtifact, throughput: dict[int, float]) -> QmaxArtifact:
    """The ladder with other completion rates, latency following Little's law."""
    rungs = []
    for r in q.rungs:
        x = throughput[r.concurrency]
        mean_ms = r.concurrency_mean / x * 1000.0
        latency = r.latency_ms.model_copy(update={"mean": mean_ms})
        rungs.append(r.model_copy(update={"throughput_rps": x, "latency_ms": latency}))
    return q.model_copy(update={"rungs": rungs})


# --- the source's worked example -------------------------------------------------------------


def test_worked_example_gives_the_source_numbers() -> None:
    p = plan()
    assert p.c_scale_max == 37.5
    assert p.c_scale_min == 25.0
    assert p.w_max_s == 2.934
    assert (p.scale_out_cooldown_s, p.scale_in_cooldown_s) == (30, 960)
    assert p.queue_max_depth == 50
    assert p.min_safe_instances == 3
    assert p.first_chunk_alarm_ms == 65
    assert p.cw_units_ratio == 1.0
    assert (p.scaling_target_value, p.scale_in_threshold) == (37.5, 25.0)
    assert finding(p, "surge_survival").verdict == "warn"
    assert finding(p, "scale_in_safety").verdict == "warn"
    assert p.verdict == "warn"
    assert p.inputs.slo_ms == 3000.0


def test_worked_example_fleet_comes_from_measured_throughput() -> None:
    p = plan()
    # X(37.5) between rungs 30 (20.1/s) and 40 (20.15/s); Little's law agrees within 0.1%.
    assert p.per_instance_rps_at_c_scale_max == pytest.approx(20.1375, abs=0.001)
    assert p.min_instances == 1  # ceil(10 / 20.137) = 1, floor 1
    assert p.max_instances == 249  # ceil(5000 / 20.137)
    cost = finding(p, "fleet_cost")
    # The source's rps x S_mean / C_scale_max = 5000 x 0.0613 / 37.5 = 8.2 -> 9 is named as wrong.
    assert "would give 9 instance(s)" in cost.detail
    assert math.ceil(5000 * 0.0613 / 37.5) == 9


def test_worked_example_findings_carry_numbers() -> None:
    p = plan()
    names = [f.name for f in p.findings]
    assert names == [
        "measurement_trust",
        "repeatability",
        "slo_budget",
        "invocation_ceiling",
        "queue_depth",
        "threshold_units",
        "knee",
        "surge_survival",
        "scale_in_safety",
        "fleet_cost",
        "provision_stage",
    ]
    surge = finding(p, "surge_survival")
    assert "shed" in surge.detail
    assert "320.2" in surge.detail
    assert "instance_logging" in finding(p, "provision_stage").detail
    assert "181.0 s of 320.2 s (57%)" in finding(p, "provision_stage").detail
    knee = finding(p, "knee")
    assert "concurrency 10" in knee.detail
    assert knee.verdict == "warn"  # both thresholds lie past the knee of this ladder
    record = p.surge_simulation or {}
    assert 0 < record["shed_fraction"] < 0.25
    assert record["worst_ttfab_p95_ms"] <= 3000
    for f in p.findings:
        assert f.detail
        assert f.recommendation


def test_config_block_is_the_registry_entry() -> None:
    p = plan()
    block = p.config_block
    assert block.startswith('"kokoro-82m": ModelEndpointConfig(\n')
    fields = [line.split("=")[0].strip() for line in block.splitlines()[1:-1]]
    namespace: dict[str, object] = {}

    def config(**kwargs: object) -> dict[str, object]:
        return kwargs

    exec(f"entry = {{{block}}}", {"ModelEndpointConfig": config}, namespace)
    entry = namespace["entry"]["kokoro-82m"]  # type: ignore[index]
    expected = {
        "model_name": "kokoro-82m",
        "instance_type": "ml.g5.xlarge",
        "min_instances": 1,
        "max_instances": 249,
        "scaling_target_value": 37.5,
        "scale_in_threshold": 25.0,
        "ttfab_slo_ms": 3000,
        "queue_max_depth": 50,
        "scale_out_cooldown_s": 30,
        "scale_in_cooldown_s": 960,
    }
    assert entry == expected
    assert fields == list(expected), "the registry's fields, in the contract's order"


def test_same_inputs_give_the_same_bytes_as_the_committed_plan() -> None:
    first = dump_json(plan())
    assert dump_json(plan()) == first
    assert PLAN_FILE.read_text(encoding="utf-8") == first
    assert "measured_at" not in first.split('"findings"')[0]


# --- refusals --------------------------------------------------------------------------------


def test_refuses_different_slugs_unless_allowed() -> None:
    other = ttotal(slug="g5xlarge-00000000")
    with pytest.raises(MismatchError, match=r"slug .g5xlarge-00000000..*--allow-config-mismatch"):
        plan(t=other)
    allowed = plan(t=other, allow_config_mismatch=True)
    assert finding(allowed, "config_match").verdict == "warn"
    assert allowed.verdict == "warn"


def test_refuses_another_slo() -> None:
    with pytest.raises(MismatchError, match=r"--slo-ms\) 2500 differs.*3000 ms"):
        plan(slo_ms=2500.0)
    assert plan(slo_ms=3000.0).inputs.slo_ms == 3000.0


@pytest.mark.parametrize("ratio", [0.99, 1.5, 2.0, float("nan")])
def test_refuses_a_surge_ratio_outside_one_to_one_and_a_half(ratio: float) -> None:
    with pytest.raises(InputError, match=r"--surge-ratio\) .*\[1, 1.5\)"):
        plan(surge_ratio=ratio)


def test_refuses_a_ttotal_over_another_transport() -> None:
    with pytest.raises(MismatchError, match=r"over bidi.*over response-stream"):
        plan(t=ttotal(transport="bidi"))


def test_refuses_another_model() -> None:
    with pytest.raises(MismatchError, match="model 'other'"):
        plan(t=ttotal(model="other"))


@pytest.mark.parametrize(
    ("field", "match"),
    [
        ("q_max", "field 'q_max': no Q_max"),
        ("s_p95_s", "field 's_p95_s'"),
        ("ttfab_p95_at_c1_ms", "field 'ttfab_p95_at_c1_ms'"),
    ],
)
def test_refuses_missing_measurements(field: str, match: str) -> None:
    with pytest.raises(ArtifactError, match=match) as caught:
        plan(q=qmax(**{field: None}))
    assert QMAX_FILE.name in str(caught.value)
    assert "\n" not in str(caught.value)


def test_refuses_a_ladder_without_usable_rungs() -> None:
    rungs = [r.model_copy(update={"usable": False}) for r in qmax().rungs]
    with pytest.raises(ArtifactError, match="field 'rungs'"):
        plan(q=qmax(rungs=rungs))


@pytest.mark.parametrize(
    ("update", "match"),
    [
        ({"peak_rps": None}, "--peak-rps) is required"),
        ({"peak_rps": 0.0}, "--peak-rps) 0"),
        ({"trough_rps": 6000.0}, "above --tts-peak-rps (tts-bench: --peak-rps)"),
        ({"min_floor": 0}, "--min-floor) 0"),
    ],
)
def test_refuses_bad_operator_inputs(update: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=re.escape(match)):
        plan(**update)


def test_refuses_malformed_artifacts_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "qmax.json"
    text = QMAX_FILE.read_text().replace('"q_max": 50', '"q_max": "fifty"')
    broken.write_text(text)
    with pytest.raises(ArtifactError, match="field 'q_max'") as caught:
        load(broken, QmaxArtifact)
    assert "\n" not in str(caught.value)
    with pytest.raises(ArtifactError, match="expected 'tts-scaling/ttotal/1'"):
        load(QMAX_FILE, TtotalArtifact)


# --- properties ------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(
    low=st.integers(1, 60),
    extra=st.integers(0, 30),
    surge=st.decimals("1.0", "1.49", places=2),
    ratio=st.sampled_from([0.5, 1.0, 1.3, 2.0]),
)
def test_more_q_max_never_lowers_thresholds(
    low: int, extra: int, surge: object, ratio: float
) -> None:
    high = min(60, low + extra)
    rungs = [r.model_copy(update={"cw_ratio": ratio}) for r in qmax().rungs]
    small = plan(q=qmax(q_max=low, rungs=rungs), surge_ratio=float(str(surge)))
    large = plan(q=qmax(q_max=high, rungs=rungs), surge_ratio=float(str(surge)))
    assert large.c_scale_max >= small.c_scale_max
    assert large.c_scale_min >= small.c_scale_min
    assert large.scaling_target_value >= small.scaling_target_value
    assert large.scale_in_threshold >= small.scale_in_threshold
    assert large.queue_max_depth >= small.queue_max_depth


@settings(max_examples=20, deadline=None)
@given(low=st.floats(0.5, 20000), factor=st.floats(1.0, 10.0))
def test_more_peak_never_shrinks_the_fleet(low: float, factor: float) -> None:
    small = plan(peak_rps=low, trough_rps=0.0)
    large = plan(peak_rps=low * factor, trough_rps=0.0)
    assert large.max_instances >= small.max_instances
    assert large.min_instances == small.min_instances
    assert small.max_instances == max(1, math.ceil(low / small.per_instance_rps_at_c_scale_max))


@settings(max_examples=40, deadline=None)
@given(surge=st.decimals("1.01", "1.49", places=2))
def test_min_safe_instances_is_the_smallest_safe_n(surge: object) -> None:
    p = plan(surge_ratio=float(str(surge)))
    limit = Fraction(str(p.c_scale_max)) / Fraction(str(p.c_scale_min))
    safe = [n for n in range(2, 400) if Fraction(n, n - 1) <= limit]
    assert p.min_safe_instances == safe[0]


@pytest.mark.parametrize(
    ("t_total", "out", "in_"),
    [(10.0, 10, 300), (50.0, 25, 300), (120.0, 30, 360), (320.2, 30, 960), (1000.0, 30, 3000)],
)
def test_cooldowns_follow_t_total(t_total: float, out: int, in_: int) -> None:
    p = plan(t=ttotal(t_total_s=t_total, t_measured_s=max(0.0, t_total - 60)))
    assert (p.scale_out_cooldown_s, p.scale_in_cooldown_s) == (out, in_)


# --- findings --------------------------------------------------------------------------------


def test_overall_verdict_is_the_worst_finding() -> None:
    def of(*verdicts: str) -> list[Finding]:
        return [
            Finding(name=str(i), verdict=v, detail="d", recommendation="r")  # type: ignore[arg-type]
            for i, v in enumerate(verdicts)
        ]

    assert overall_verdict(of("ok", "ok")) == "ok"
    assert overall_verdict(of("ok", "warn")) == "warn"
    assert overall_verdict(of("warn", "stop", "ok")) == "stop"


def test_measured_cw_ratio_converts_the_thresholds() -> None:
    rungs = [
        r.model_copy(update={"cw_ratio": 1.2 if r.concurrency == 40 else 0.8}) for r in qmax().rungs
    ]
    p = plan(q=qmax(rungs=rungs))
    assert p.cw_units_ratio == 1.2  # rung 40 is nearest C_scale_max 37.5
    assert p.scaling_target_value == 45.0
    assert p.scale_in_threshold == 30.0
    assert finding(p, "threshold_units").verdict == "warn"  # 0.8..1.2 depends on load


def test_unmeasured_cw_ratio_means_client_units() -> None:
    rungs = [r.model_copy(update={"cw_ratio": None}) for r in qmax().rungs]
    p = plan(q=qmax(rungs=rungs))
    assert p.cw_units_ratio == 1.0
    assert p.scaling_target_value == 37.5
    units = finding(p, "threshold_units")
    assert units.verdict == "warn"
    assert "client units" in units.detail
    local = qmax(rungs=rungs)
    local.deployed_config = local.deployed_config.model_copy(update={"instance_type": "local"})
    assert finding(plan(q=local), "threshold_units").verdict == "ok"


def test_invocation_ceiling_stops_a_plan_past_sixty_seconds() -> None:
    p = plan(q=qmax(slo_ms=59950.0))
    assert finding(p, "invocation_ceiling").verdict == "stop"
    assert p.verdict == "stop"


def test_slo_budget_stops_when_service_alone_uses_the_slo() -> None:
    p = plan(q=qmax(slo_ms=60.0))
    assert p.w_max_s == 0.0
    assert finding(p, "slo_budget").verdict == "stop"


def test_repeatability_needs_more_than_one_run() -> None:
    assert finding(plan(q=qmax(runs_q_max=[50])), "repeatability").verdict == "warn"
    assert finding(plan(q=qmax(runs_q_max=[])), "repeatability").verdict == "warn"
    spread = finding(plan(q=qmax(runs_q_max=[50, 40, 50])), "repeatability")
    assert spread.verdict == "warn"
    assert "[50, 40, 50]" in spread.detail


def test_measurement_trust() -> None:
    assert finding(plan(q=qmax(q_max_bracketed=False)), "measurement_trust").verdict == "warn"
    assert finding(plan(q=qmax(frozen=False)), "measurement_trust").verdict == "warn"
    rungs = [
        r.model_copy(update={"usable": False, "unusable_reason": "gate_limited"})
        if r.concurrency == 50
        else r
        for r in qmax().rungs
    ]
    broken = finding(plan(q=qmax(rungs=rungs)), "measurement_trust")
    assert broken.verdict == "stop"
    assert "50 (gate_limited)" in broken.detail


def test_scale_in_safety_is_ok_at_the_safe_floor() -> None:
    p = plan(min_floor=3)
    assert p.min_instances == 3
    assert finding(p, "scale_in_safety").verdict == "ok"


def test_surge_ratio_one_leaves_no_hysteresis() -> None:
    p = plan(surge_ratio=1.0)
    assert p.c_scale_max == p.c_scale_min == 50
    assert finding(p, "scale_in_safety").verdict == "stop"


def test_a_server_with_headroom_survives_the_surge() -> None:
    # Throughput that grows with concurrency up to Q_max: 25% more load fits below Q_max.
    growing = {1: 16.0, 5: 80.0, 10: 160.0, 20: 320.0, 30: 480.0, 40: 640.0, 50: 800.0, 60: 805.0}
    p = plan(q=with_throughput(qmax(), growing))
    assert finding(p, "surge_survival").verdict == "ok"
    assert finding(p, "knee").verdict == "ok"
    assert p.per_instance_rps_at_c_scale_max == pytest.approx(600.0, rel=0.01)
    assert p.max_instances == math.ceil(5000 / p.per_instance_rps_at_c_scale_max)


def test_throughput_that_collapses_before_q_max_stops_the_plan() -> None:
    # Sized at X(37.5) = 20.1/s, but at Q_max an instance completes 15/s: the fleet at
    # max_instances cannot carry the peak, so the simulated surge never stops shedding.
    collapsing = {1: 16.31, 5: 19.0, 10: 19.8, 20: 20.0, 30: 20.1, 40: 18.0, 50: 15.0, 60: 14.0}
    p = plan(q=with_throughput(qmax(), collapsing))
    surge = finding(p, "surge_survival")
    assert surge.verdict == "stop"
    assert "still shedding" in surge.detail
    assert finding(p, "knee").verdict == "warn"
    assert p.verdict == "stop"


def test_little_law_disagreement_is_a_warning() -> None:
    q = qmax()
    rungs = [
        r.model_copy(
            update={
                "latency_ms": r.latency_ms.model_copy(update={"mean": (r.latency_ms.mean or 0) * 2})
            }
        )
        if r.concurrency in (30, 40)
        else r
        for r in q.rungs
    ]
    p = plan(q=qmax(rungs=rungs))
    cost = finding(p, "fleet_cost")
    assert cost.verdict == "warn"
    assert "disagree" in cost.detail
    # The lower value (Little's law, half the measured rate) sizes the fleet.
    assert p.per_instance_rps_at_c_scale_max == pytest.approx(10.07, abs=0.01)


def test_a_fleet_with_nothing_to_scale_is_a_warning() -> None:
    p = plan(min_floor=300)
    assert p.min_instances == p.max_instances == 300
    assert finding(p, "fleet_cost").verdict == "warn"


def test_unusable_rungs_stay_out_of_the_curve() -> None:
    rungs: list[Rung] = [
        r.model_copy(update={"usable": False, "throughput_rps": 1000.0})
        if r.concurrency == 40
        else r
        for r in qmax().rungs
    ]
    p = plan(q=qmax(rungs=rungs))
    # X(37.5) now between rung 30 (20.1) and 50 (20.2).
    assert p.per_instance_rps_at_c_scale_max == pytest.approx(20.1 + 0.1 * 7.5 / 20, abs=0.001)


# --- the plan stores what it decided (schema 2) ----------------------------------------------


def test_the_committed_plan_holds_its_curve_and_policy_and_gives_the_same_outcome() -> None:
    computed = compute_plan(qmax(), ttotal(), PlanInputs(peak_rps=5000, trough_rps=10))
    stored = stored_outcome(load(PLAN_FILE, PlanArtifact))
    assert stored is not None
    assert stored.curve == computed.curve
    assert stored.policy == computed.policy
    assert (stored.surge_start_s, stored.surge_instances) == (
        computed.surge_start_s,
        computed.surge_instances,
    )
    assert stored.surge.serving.tolist() == computed.surge.serving.tolist()
    assert stored.surge.ttfab_p95_ms.tolist() == computed.surge.ttfab_p95_ms.tolist()
    assert stored.surge.shed.tolist() == computed.surge.shed.tolist()


def test_a_schema_1_plan_is_still_read_and_holds_no_outcome(tmp_path: Path) -> None:
    old = json.loads(PLAN_FILE.read_text())
    old["schema"] = "tts-scaling/plan/1"
    del old["service_curve"], old["policy"]
    path = tmp_path / "plan-kokoro-82m.json"
    path.write_text(json.dumps(old))
    read = load(path, PlanArtifact)
    assert read.schema_ == "tts-scaling/plan/1"
    assert read.max_instances == 249
    assert stored_outcome(read) is None


def test_another_plan_schema_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(
        json.dumps({**json.loads(PLAN_FILE.read_text()), "schema": "tts-scaling/plan/9"})
    )
    with pytest.raises(ArtifactError, match=r"field 'schema': expected 'tts-scaling/plan/2'"):
        load(path, PlanArtifact)
