"""Each step's inputs: built from the parsed options by its one builder, frozen, and refusing a
field it does not have (a misspelled keyword of a caller fails at once, naming it)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from pytest_tts_scaling.endpoints.target import EndpointTarget
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps.deployed import DeployedInputs, ValidateLiveInputs
from pytest_tts_scaling.steps.inputs import SloInputs, TrackingInputs
from pytest_tts_scaling.steps.plan import PlanStepInputs
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs

# Every option a step reads, away from its default, so a field the builder forgets shows.
OPTIONS = RunOptions(
    endpoint_url="http://127.0.0.1:9",
    inference_component="kokoro-ic",
    model="m",
    transport="bidi",
    slo_ms=900.0,
    slo_tiers_ms=(450.0, 900.0),
    slo_metric="playback",
    ladder=(1, 2, 4),
    max_concurrency=16,
    hold_s=8.0,
    measure_s=5.0,
    gap_s=1.0,
    runs=2,
    min_qmax=3,
    fail_on_inconclusive=True,
    no_confirm=True,
    invocation_limit_s=7.0,
    dry_run=True,
    artifacts_dir=Path("out"),
    allow_config_mismatch=True,
    allow_shallow_queue=True,
    wer_sample=2,
    max_wer=0.3,
    max_wer_increase=0.2,
    force=True,
    mlflow=True,
    mlflow_run_name="nightly",
    qmax_artifact=Path("a/qmax-1.json"),
    qmax_artifacts=(Path("a/qmax-1.json"), Path("a/qmax-2.json")),
    ttotal_artifact=Path("b/ttotal-1.json"),
    plan_artifact=Path("c/plan-m.json"),
    scenario="openai-speech",
    prices=Path("prices.toml"),
    hourly_rps=tuple(float(h) for h in range(24)),
    peak_rps=40.0,
    trough_rps=2.0,
    min_floor=2,
    surge_ratio=1.3,
    baseline="mlflow:abc",
    regression_tolerance=2.0,
)


def round_trips(model: BaseModel) -> None:
    assert type(model).model_validate(model.model_dump()) == model


def test_the_qmax_inputs_carry_every_option_the_step_reads() -> None:
    inputs = QmaxInputs.from_options(OPTIONS)
    round_trips(inputs)
    assert inputs.target == EndpointTarget(
        endpoint_url="http://127.0.0.1:9",
        inference_component="kokoro-ic",
        artifacts_dir=Path("out"),
        force=True,
        invocation_limit_s=7.0,
    )
    assert inputs.target.kind == "url"
    workload = inputs.workload
    assert (workload.model, workload.component, workload.transport) == ("m", "kokoro-ic", "bidi")
    assert inputs.slo == SloInputs(ms=900.0, tiers_ms=(450.0, 900.0), metric="playback")
    ladder = inputs.ladder
    assert (ladder.concurrencies, ladder.max_concurrency, ladder.runs) == ((1, 2, 4), 16, 2)
    assert (ladder.hold_s, ladder.measure_s, ladder.gap_s) == (8.0, 5.0, 1.0)
    assert ladder.no_confirm
    assert ladder.allow_shallow_queue
    quality = inputs.quality
    assert (quality.wer_sample, quality.max_wer, quality.max_wer_increase) == (2, 0.3, 0.2)
    gates = inputs.gates
    assert (gates.baseline, gates.regression_tolerance, gates.min_qmax) == ("mlflow:abc", 2.0, 3)
    assert gates.allow_config_mismatch
    assert gates.fail_on_inconclusive
    assert inputs.tracking == TrackingInputs(
        enabled=True, experiment="tts-scaling-m", run_name="nightly"
    )
    assert (inputs.outputs.artifacts_dir, inputs.outputs.dry_run) == (Path("out"), True)


def test_the_ladder_defaults_are_decided_for_the_endpoint_kind() -> None:
    local = QmaxInputs.from_options(RunOptions()).ladder
    remote = QmaxInputs.from_options(RunOptions(endpoint="speech-kokoro-82m")).ladder
    assert (local.hold_s, local.measure_s, local.gap_s) == (25.0, 15.0, 2.0)
    assert (remote.hold_s, remote.measure_s, remote.gap_s) == (240.0, 60.0, 30.0)
    assert QmaxInputs.from_options(RunOptions()).slo.tiers_ms == (3000.0,)
    with pytest.raises(argparse.ArgumentTypeError, match=r"--measure-s.*longer than"):
        QmaxInputs.from_options(RunOptions(hold_s=10, measure_s=20))


def test_the_ttotal_inputs_carry_every_option_the_step_reads() -> None:
    inputs = TtotalInputs.from_options(OPTIONS)
    round_trips(inputs)
    assert inputs.target == QmaxInputs.from_options(OPTIONS).target
    assert (inputs.probe.hold_s, inputs.probe.measure_s) == (8.0, 5.0)
    assert inputs.qmax_artifacts == (Path("a/qmax-1.json"), Path("a/qmax-2.json"))
    assert inputs.allow_config_mismatch
    assert inputs.artifacts_dir == Path("out")
    # One --qmax-artifact set directly (not parsed) is the one file.
    one = TtotalInputs.from_options(RunOptions(qmax_artifact=Path("q.json")))
    assert one.qmax_artifacts == (Path("q.json"),)


def test_the_plan_inputs_name_the_artifacts_by_file_name_only() -> None:
    inputs = PlanStepInputs.from_options(OPTIONS)
    round_trips(inputs)
    assert inputs.qmax_artifacts == (Path("a/qmax-1.json"), Path("a/qmax-2.json"))
    assert inputs.ttotal_artifacts == (Path("b/ttotal-1.json"),)
    assert inputs.prices == Path("prices.toml")
    choices = inputs.choices
    assert (choices.qmax_name, choices.ttotal_name) == ("qmax-1.json", "ttotal-1.json")
    assert (choices.peak_rps, choices.trough_rps, choices.min_floor) == (40.0, 2.0, 2)
    assert (choices.surge_ratio, choices.slo_ms) == (1.3, 900.0)
    assert choices.allow_config_mismatch
    assert choices.hourly_rps == OPTIONS.hourly_rps


def test_the_deployed_inputs_find_the_plan_where_the_plan_step_writes_it() -> None:
    inputs = ValidateLiveInputs.from_options(OPTIONS)
    round_trips(inputs)
    assert inputs.target == QmaxInputs.from_options(OPTIONS).target
    assert (inputs.model, inputs.plan_path) == ("m", Path("c/plan-m.json"))
    assert (inputs.transport, inputs.scenario) == ("bidi", "openai-speech")
    default = DeployedInputs.from_options(RunOptions(endpoint="speech-m", artifacts_dir=Path("o")))
    assert default.plan_path == Path("o/plan-kokoro-82m.json")


@pytest.mark.parametrize(
    ("model", "misspelled"),
    [
        (QmaxInputs.from_options(OPTIONS), "slo_mss"),
        (TtotalInputs.from_options(OPTIONS), "hold_s"),
        (PlanStepInputs.from_options(OPTIONS), "peak_rps"),
        (QmaxInputs.from_options(OPTIONS).ladder, "ladder"),
        (QmaxInputs.from_options(OPTIONS).target, "url"),
        (ValidateLiveInputs.from_options(OPTIONS), "plan"),
    ],
)
def test_each_inputs_model_refuses_a_field_it_does_not_have(
    model: BaseModel, misspelled: str
) -> None:
    with pytest.raises(ValidationError, match=rf"{misspelled}\n  Extra inputs are not permitted"):
        type(model).model_validate({**model.model_dump(), misspelled: 1})


def test_inputs_are_frozen() -> None:
    inputs = QmaxInputs.from_options(OPTIONS)
    with pytest.raises(ValidationError, match="frozen"):
        inputs.slo = SloInputs(ms=1.0, tiers_ms=(1.0,))
