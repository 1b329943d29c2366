"""Which instance to buy: the plan weighs measured instance types by cost.

The second instance type is the source's worked example measured again on a CPU instance: the
same ladder with every rung completing a share of the GPU's requests (latency following Little's
law), as a slower instance would.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_tts_scaling.artifacts import dump_json, load, save
from pytest_tts_scaling.cli import main
from pytest_tts_scaling.core.plan import PlanOutcome, compute_plan, stored_outcome
from pytest_tts_scaling.core.plan.candidates import (
    Measured,
    Priced,
    pair_measurements,
    plan_candidates,
)
from pytest_tts_scaling.core.plan.prices import PriceList, parse_prices
from pytest_tts_scaling.core.schema import PlanArtifact, PlanCandidate, QmaxArtifact, Summary
from pytest_tts_scaling.errors import InputError, MismatchError
from pytest_tts_scaling.option_table import hourly_rps
from pytest_tts_scaling.steps.plan import read_prices
from tests.test_plan import PLAN_FILE, QMAX_FILE, SOURCE, TTOTAL_FILE, qmax, ttotal, with_throughput

ROOT = Path(__file__).resolve().parents[1]
PRICE_FILE = ROOT / "examples" / "prices" / "sagemaker-us-east-1.toml"
GPU, CPU = "ml.g5.xlarge", "ml.c5.xlarge"
CPU_SLUG = "c5xlarge-8b1b96bc"
PRICES = Priced(PriceList(price_per_hour={GPU: 1.408, CPU: 0.204}), "prices.toml")


def cpu_qmax(share: float, **update: Any) -> QmaxArtifact:
    """The worked example's ladder on a CPU instance completing ``share`` of its requests."""
    q = qmax()
    q = with_throughput(q, {r.concurrency: r.throughput_rps * share for r in q.rungs})
    config = q.deployed_config.model_copy(update={"instance_type": CPU})
    return q.model_copy(update={"deployed_config": config, "slug": CPU_SLUG, **update})


def gpu() -> Measured:
    return Measured(qmax(), ttotal(), QMAX_FILE.name, TTOTAL_FILE.name)


def cpu(share: float, **update: Any) -> Measured:
    return Measured(
        cpu_qmax(share, **update), ttotal(slug=CPU_SLUG), "qmax-cpu.json", "ttotal-cpu.json"
    )


def weigh(*measured: Measured, priced: Priced | None = PRICES, **inputs: Any) -> PlanOutcome:
    return plan_candidates(measured, dataclasses.replace(SOURCE, **inputs), priced)


def by_type(plan: PlanArtifact) -> dict[str, PlanCandidate]:
    return {c.instance_type: c for c in plan.candidates or ()}


def alone(m: Measured) -> PlanArtifact:
    """The candidate's plan as a plan of it alone."""
    named = dataclasses.replace(SOURCE, qmax_name=m.qmax_name, ttotal_name=m.ttotal_name)
    return compute_plan(m.qmax, m.ttotal, named).artifact


def single_plan_fields(plan: PlanArtifact) -> dict[str, Any]:
    """What a reader of one plan reads: everything but the candidates and the price file."""
    data = json.loads(dump_json(plan))
    data.pop("candidates", None)
    data["inputs"].pop("prices", None)
    return data


# --- the choice --------------------------------------------------------------------------------


def test_the_cheaper_instance_loses_on_fleet_size() -> None:
    # A tenth of the GPU's throughput at a seventh of its price: ten times the fleet.
    outcome = weigh(gpu(), cpu(0.1))
    plan = outcome.artifact
    g, c = by_type(plan)[GPU], by_type(plan)[CPU]
    assert c.price_per_hour < g.price_per_hour
    assert c.max_instances > 9 * g.max_instances
    assert c.cost_per_day > g.cost_per_day
    assert (g.chosen, c.chosen) == (True, False)
    assert "cheaper per instance hour (0.204 against 1.408) but the fleet is larger" in c.why
    assert f"{c.max_instances} instances at peak against {g.max_instances}" in c.why
    # The plan's own fields are the GPU's plan, as if it had been planned alone.
    assert single_plan_fields(plan) == single_plan_fields(alone(gpu()))
    assert plan.instance_type == GPU
    assert outcome.policy.max_instances == g.max_instances == plan.max_instances


def test_the_cheaper_instance_wins_when_its_fleet_is_small_enough() -> None:
    # A fifth of the GPU's throughput at a seventh of its price.
    outcome = weigh(gpu(), cpu(0.2))
    plan = outcome.artifact
    g, c = by_type(plan)[GPU], by_type(plan)[CPU]
    assert c.max_instances > g.max_instances
    assert c.cost_per_day < g.cost_per_day
    assert c.cost_per_hour_at_peak < g.cost_per_hour_at_peak
    assert (g.chosen, c.chosen) == (False, True)
    assert g.why.startswith(f"lost: USD {g.cost_per_day:.2f} a day against {CPU}'s")
    assert single_plan_fields(plan) == single_plan_fields(alone(cpu(0.2)))
    assert 'instance_type="ml.c5.xlarge"' in plan.config_block
    assert plan.slug == CPU_SLUG
    assert plan.inputs.qmax_artifact is not None
    assert plan.inputs.qmax_artifact.file == "qmax-cpu.json"


def test_costs_follow_the_fleet_and_the_price() -> None:
    plan = weigh(gpu(), cpu(0.2)).artifact
    for c in plan.candidates or ():
        assert c.cost_per_hour_at_peak == pytest.approx(c.max_instances * c.price_per_hour)
        assert c.cost_per_hour_at_trough == pytest.approx(c.min_instances * c.price_per_hour)
        assert c.cost_per_day == pytest.approx(c.instance_hours_per_day * c.price_per_hour, 1e-6)
        # A day between trough and peak costs less than a day at peak, more than one at trough.
        assert 24 * c.cost_per_hour_at_trough < c.cost_per_day < 24 * c.cost_per_hour_at_peak
        assert c.policy.max_instances == c.max_instances
        assert c.shed_fraction_per_day < 0.01


def test_a_cheaper_candidate_whose_plan_stops_loses() -> None:
    # Cheap and fast enough, but its throughput collapses before Q_max: it cannot carry the peak.
    collapsing = {1: 16.31, 5: 19.0, 10: 19.8, 20: 20.0, 30: 20.1, 40: 18.0, 50: 15.0, 60: 14.0}
    slow = with_throughput(cpu_qmax(1.0), {k: v * 0.5 for k, v in collapsing.items()})
    bad = Measured(slow, ttotal(slug=CPU_SLUG), "qmax-cpu.json", "ttotal-cpu.json")
    plan = weigh(gpu(), bad).artifact
    g, c = by_type(plan)[GPU], by_type(plan)[CPU]
    assert c.cost_per_day < g.cost_per_day
    assert c.stops == ["surge_survival"]
    assert g.chosen
    assert not c.chosen
    assert c.why == "lost: its plan stops (surge_survival: misses the surge rule)"
    assert plan.verdict == "warn"


def test_when_no_candidate_qualifies_the_plan_stops() -> None:
    plan = weigh(gpu(), cpu(0.2), surge_ratio=1.0).artifact
    assert plan.verdict == "stop"
    chosen = [c for c in plan.candidates or () if c.chosen]
    assert [c.instance_type for c in chosen] == [CPU]  # the cheapest
    assert "no candidate meets the SLO and the surge rule" in chosen[0].why
    lost = by_type(plan)[GPU]
    assert lost.why.endswith("scale_in_safety: misses safe scale-in)")


def test_cost_per_audio_hour_divides_the_day_by_the_audio_served() -> None:
    rungs = [
        r.model_copy(update={"audio_s": Summary.model_validate(dict.fromkeys(_STATS, 4.0))})
        for r in cpu_qmax(0.2).rungs
    ]
    plan = weigh(gpu(), cpu(0.2, rungs=rungs)).artifact
    c, g = by_type(plan)[CPU], by_type(plan)[GPU]
    assert c.audio_s_per_request == 4.0
    audio_hours = c.requests_served_per_day * 4.0 / 3600.0
    assert c.cost_per_audio_hour == pytest.approx(c.cost_per_day / audio_hours, rel=1e-4)
    assert g.audio_s_per_request is None
    assert g.cost_per_audio_hour is None


_STATS = ("mean", "min", "max", "std", "p50", "p90", "p95", "p99")


def test_an_hourly_profile_at_the_peak_costs_the_peak_fleet_all_day() -> None:
    plan = weigh(gpu(), cpu(0.2), hourly_rps=(5000.0,) * 24).artifact
    for c in plan.candidates or ():
        assert c.instance_hours_per_day == pytest.approx(24 * c.max_instances)
        assert c.cost_per_day == pytest.approx(24 * c.cost_per_hour_at_peak)
    assert plan.inputs.hourly_rps == [5000.0] * 24
    assert (
        "of the hourly profile" in next(f for f in plan.findings if f.name == "fleet_cost").detail
    )


def test_an_hourly_profile_above_the_peak_is_refused() -> None:
    with pytest.raises(InputError, match=r"--hourly-rps\) reaches 6000 rps, above"):
        weigh(gpu(), hourly_rps=(10.0,) * 23 + (6000.0,))
    with pytest.raises(InputError, match="23 rates: expected 24"):
        weigh(gpu(), hourly_rps=(10.0,) * 23)


def test_hourly_rps_option_takes_24_rates() -> None:
    assert hourly_rps(",".join(["5"] * 24)) == (5.0,) * 24
    for bad in (",".join(["5"] * 23), ",".join(["5"] * 23 + ["-1"]), "a"):
        with pytest.raises(Exception, match="expected 24 comma-separated numbers >= 0"):
            hourly_rps(bad)


# --- one candidate: the worked example as it was -----------------------------------------------


def test_the_worked_example_alone_and_unpriced_gives_the_committed_bytes() -> None:
    plan = weigh(gpu(), priced=None).artifact
    assert dump_json(plan) == PLAN_FILE.read_text(encoding="utf-8")
    assert "candidates" not in dump_json(plan)


def test_the_worked_example_priced_keeps_every_field_and_adds_its_cost() -> None:
    plan = weigh(gpu()).artifact
    committed = load(PLAN_FILE, PlanArtifact)
    assert single_plan_fields(plan) == single_plan_fields(committed)
    assert plan.candidates is not None
    (only,) = plan.candidates
    assert only.chosen
    assert only.why == "chosen: the only instance type weighed"
    assert (only.min_instances, only.max_instances) == (1, 249)
    assert only.cost_per_hour_at_peak == pytest.approx(249 * 1.408)


# --- pairing and refusals ----------------------------------------------------------------------


def test_artifacts_pair_by_instance_type_and_image_in_any_order() -> None:
    c = cpu(0.2)
    paired = pair_measurements(
        [("q-gpu.json", qmax()), ("q-cpu.json", c.qmax)],
        [("t-cpu.json", c.ttotal), ("t-gpu.json", ttotal())],
    )
    assert [(m.qmax_name, m.ttotal_name) for m in paired] == [
        ("q-gpu.json", "t-gpu.json"),
        ("q-cpu.json", "t-cpu.json"),
    ]


@pytest.mark.parametrize(
    ("qmaxes", "ttotals", "match"),
    [
        (["gpu", "cpu"], ["gpu"], r"q-cpu.json measured slug 'c5xlarge-8b1b96bc' and no ttotal"),
        (["gpu"], ["gpu", "cpu"], r"t-cpu.json measured slug 'c5xlarge-8b1b96bc' and no qmax"),
        (["gpu", "gpu"], ["gpu"], r"q-gpu.json and q-gpu.json both measured slug"),
        (["gpu", "cpu"], ["gpu", "gpu", "cpu"], r"both measured slug 'g5xlarge-8b1b96bc'"),
    ],
)
def test_unpaired_or_repeated_artifacts_are_refused(
    qmaxes: list[str], ttotals: list[str], match: str
) -> None:
    q = {"gpu": qmax(), "cpu": cpu_qmax(0.2)}
    t = {"gpu": ttotal(), "cpu": ttotal(slug=CPU_SLUG)}
    with pytest.raises(MismatchError, match=match) as caught:
        pair_measurements(
            [(f"q-{k}.json", q[k]) for k in qmaxes], [(f"t-{k}.json", t[k]) for k in ttotals]
        )
    assert "\n" not in str(caught.value)


def test_several_instance_types_need_prices() -> None:
    with pytest.raises(
        InputError, match=r"2 instance types to weigh by cost: expected --tts-prices"
    ):
        weigh(gpu(), cpu(0.2), priced=None)


def test_a_slug_in_the_price_file_prices_that_deployment_alone() -> None:
    # Two measurements of one instance type (say two local machines): the slug tells them apart.
    priced = Priced(PriceList(price_per_hour={GPU: 1.408, CPU_SLUG: 0.1, CPU: 9.0}), "p.toml")
    assert by_type(weigh(gpu(), cpu(0.2), priced=priced).artifact)[CPU].price_per_hour == 0.1


def test_an_unpriced_instance_type_is_refused_naming_it() -> None:
    priced = Priced(PriceList(price_per_hour={GPU: 1.408}), "p.json")
    with pytest.raises(InputError, match=r"p.json: field 'price_per_hour': no price for 'ml.c5"):
        weigh(gpu(), cpu(0.2), priced=priced)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [("slo_ms", 2500.0, "field 'slo_ms'"), ("model", "other", "field 'model'")],
)
def test_candidates_measured_for_another_slo_or_model_are_refused(
    field: str, value: object, match: str
) -> None:
    other = cpu(0.2, **{field: value})
    with pytest.raises(MismatchError, match=match):
        weigh(gpu(), other)


# --- the price file ----------------------------------------------------------------------------


def test_the_example_price_file_reads_and_says_where_it_came_from() -> None:
    priced = read_prices(PRICE_FILE)
    prices = priced.prices
    assert prices.currency == "USD"
    assert prices.region == "us-east-1"
    assert prices.as_of
    assert prices.source
    assert "aws.amazon.com/sagemaker/pricing" in prices.source
    assert prices.note
    assert "checked" in prices.note
    assert {GPU, CPU} <= set(prices.price_per_hour)


def test_json_and_toml_price_files_read_alike(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps({"price_per_hour": {GPU: 1.5}}))
    (tmp_path / "p.toml").write_text(f'[price_per_hour]\n"{GPU}" = 1.5\n')
    assert read_prices(tmp_path / "p.json").prices == read_prices(tmp_path / "p.toml").prices


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({}, "p.toml: field 'price_per_hour': required"),
        ({"price_per_hour": {}}, "p.toml: field 'price_per_hour'"),
        ({"price_per_hour": {GPU: -1}}, "ml.g5.xlarge: expected a positive price per hour"),
        ({"price_per_hour": {GPU: "cheap"}}, r"field 'price_per_hour.ml.g5.xlarge'"),
        ({"price_per_hour": {GPU: 1.0}, "prices": 1}, "field 'prices': not a price file field"),
        ([1], "p.toml: expected a table of fields"),
    ],
)
def test_bad_price_files_are_refused_naming_the_field(raw: Any, match: str) -> None:
    with pytest.raises(InputError, match=match) as caught:
        parse_prices(raw, "p.toml")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("p.yaml", "", r"--tts-prices \(tts-bench: --prices\) .*p.yaml: expected a .json or"),
        ("p.json", "{", "p.json: not JSON"),
        ("p.toml", "[price", "p.toml: not TOML"),
    ],
)
def test_unreadable_price_files_are_refused(
    tmp_path: Path, name: str, text: str, match: str
) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError, match=match):
        read_prices(tmp_path / name)


# --- the doors ---------------------------------------------------------------------------------


def test_tts_bench_plan_weighs_two_instance_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = cpu(0.2)
    q_cpu = save(c.qmax, tmp_path / "in" / "qmax-cpu.json")
    t_cpu = save(c.ttotal, tmp_path / "in" / "ttotal-cpu.json")
    args = [
        *("--qmax-artifact", QMAX_FILE, "--qmax-artifact", q_cpu),
        *("--ttotal-artifact", t_cpu, "--ttotal-artifact", TTOTAL_FILE),
        *("--peak-rps", "5000", "--trough-rps", "10", "--prices", PRICE_FILE),
        *("--artifacts-dir", tmp_path / "out"),
    ]
    assert main(["plan", *(str(a) for a in args)]) == 0
    out = capsys.readouterr().out
    assert "candidates (USD per hour at peak and trough, per day between trough and peak" in out
    assert "as of 2025-01" in out
    rows = [line for line in out.splitlines() if "ml.c5.xlarge " in line or "ml.g5.xlarge " in line]
    assert [row[:2] for row in rows] == ["  ", "* "]  # the CPU, chosen, after the GPU
    assert "lost: USD" in out
    written = load(tmp_path / "out" / "plan-kokoro-82m.json", PlanArtifact)
    assert written.instance_type == CPU
    assert written.inputs.prices is not None
    assert written.inputs.prices.file == PRICE_FILE.name
    assert [c.instance_type for c in written.candidates or ()] == [GPU, CPU]
    # A reader of one plan reads the chosen one, its curve and policy included.
    stored = stored_outcome(written)
    assert stored is not None
    assert stored.policy.max_instances == written.max_instances


def test_ttotal_takes_one_qmax_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["ttotal", "--qmax-artifact", str(QMAX_FILE), "--qmax-artifact", str(QMAX_FILE)]
    assert main([*args, "--artifacts-dir", str(tmp_path)]) == 2
    assert "ttotal measures one instance type" in capsys.readouterr().err


def test_the_plan_page_shows_the_candidates_side_by_side(tmp_path: Path) -> None:
    from pytest_tts_scaling.report.pages import plan_view

    outcome = weigh(gpu(), cpu(0.2))
    view = plan_view(outcome.artifact, tmp_path / "plan-kokoro-82m.json", outcome, None)
    assert any(
        f.label == "instance type" and f.value.startswith(f"{CPU} of 2 weighed: USD")
        for f in view.facts
    )
    table = view.tables.split("<h4>instance types weighed by cost</h4>", 1)[1].split("</table>")[0]
    rows = table.split("<tr")[2:]
    assert [row.split("</td>")[0].rsplit(">", 1)[1] for row in rows] == [GPU, CPU]
    assert "font-weight: bold" in rows[1]
    g, c = by_type(outcome.artifact)[GPU], by_type(outcome.artifact)[CPU]
    for candidate, row in ((g, rows[0]), (c, rows[1])):
        assert f"{candidate.min_instances}..{candidate.max_instances}" in row
        assert f"{candidate.cost_per_day:,.2f}" in row
        assert candidate.why in html.unescape(row)
    assert "n/a" in rows[0]  # no audio length recorded: no cost per audio hour
