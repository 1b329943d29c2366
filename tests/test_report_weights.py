"""Every artifact names the weights that served: a local ttotal or plan artifact of the trained
default is not called the untrained development model (its slug is local- either way)."""

from __future__ import annotations

from pytest_tts_scaling.core.plan import PlanInputs
from pytest_tts_scaling.core.plan.render import inputs_record
from pytest_tts_scaling.core.schema import TtotalArtifact
from pytest_tts_scaling.report.extras import made_by_dev_model, weights_label
from pytest_tts_scaling.steps.validate_live import emulated_ttotal
from tests.factories import make_plan, make_qmax

TRAINED = "trained (int8-derived v1.0)"
UNTRAINED = "untrained (development)"


def _local_qmax(weights: str | None):  # type: ignore[no-untyped-def]
    deployed = {"instance_type": "local", "image_digest": "sha256:1234", "weights": weights}
    return make_qmax(deployed_config=deployed)


def test_a_ttotal_artifact_carries_the_weights_of_its_qmax_run() -> None:
    trained = emulated_ttotal(_local_qmax(TRAINED))
    untrained = emulated_ttotal(_local_qmax(UNTRAINED))
    assert (trained.slug, untrained.slug) == ("local-12345678", "local-12345678")
    assert (weights_label(trained), made_by_dev_model(trained)) == (TRAINED, False)
    assert (weights_label(untrained), made_by_dev_model(untrained)) == (UNTRAINED, True)


def test_a_plan_names_the_weights_of_the_qmax_it_rests_on() -> None:
    inputs = PlanInputs(
        peak_rps=50.0, trough_rps=1.0, qmax_name="qmax.json", ttotal_name="ttotal.json"
    )
    for weights, dev in ((TRAINED, False), (UNTRAINED, True)):
        qmax = _local_qmax(weights)
        record = inputs_record(qmax, emulated_ttotal(qmax), inputs)
        plan = make_plan(slug="local-12345678", inputs=record.model_dump())
        assert (weights_label(plan), made_by_dev_model(plan)) == (weights, dev)


def test_an_older_local_artifact_without_weights_reads_as_the_development_model() -> None:
    old = emulated_ttotal(_local_qmax(None)).model_dump(by_alias=True, exclude={"weights"})
    assert made_by_dev_model(TtotalArtifact.model_validate(old))
    assert not made_by_dev_model(make_plan())  # a SageMaker plan
