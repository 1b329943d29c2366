"""--mlflow: each step's run in a real local MLflow store, read back with MlflowClient.

The qmax runs measure the serial calibration server (Q_max 2 at a 200 ms SLO, three short rungs:
tests/test_baseline_gate.py); the plan and ttotal runs record the committed example artifacts.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_tts_scaling.artifacts import load
from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.cli import main
from pytest_tts_scaling.core.schema import PlanArtifact, QmaxArtifact, TtotalArtifact
from pytest_tts_scaling.core.tracking import PASS, Verdict, plan_record, qmax_record
from pytest_tts_scaling.optional import needs_extra
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.report.extras import timed_stages
from pytest_tts_scaling.steps.inputs import TrackingInputs
from pytest_tts_scaling.steps.tracking import record_ttotal
from tests.test_baseline_gate import (
    LOADED_MACHINE,
    QMAX_EXAMPLE,
    SHORT_LADDER,
    SLO,
    TTOTAL_EXAMPLE,
    only_artifact,
    qmax_args,
)
from tests.test_health import closed_port

# Imported with this module, before any pytester run: pytester drops the modules a test imports
# when it ends, and MLflow's store (SQLAlchemy's compiled parts) loads once per process.
pytest.importorskip("mlflow", reason=needs_extra("mlflow"))
pytest.importorskip("mlflow.store.tracking.sqlalchemy_store", reason=needs_extra("sqlalchemy"))
from mlflow import MlflowClient

if TYPE_CHECKING:
    from mlflow.entities import Run

PLAN_ARGS = ("--qmax-artifact", str(QMAX_EXAMPLE), "--ttotal-artifact", str(TTOTAL_EXAMPLE))
TRAFFIC = ("--peak-rps", "5000", "--trough-rps", "10")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    """A local MLflow store (SQLite, as MLflow makes by default) that MLFLOW_TRACKING_URI names;
    the client that reads it back. The working directory is tmp_path: the store's artifacts go
    to ./mlruns."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return MlflowClient(uri)


def runs_of(client: MlflowClient, experiment: str) -> list[Run]:
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r}"
    return list(client.search_runs([found.experiment_id], order_by=["attributes.start_time"]))


def artifact_names(client: MlflowClient, run: Run) -> set[str]:
    return {Path(item.path).name for item in client.list_artifacts(run.info.run_id)}


def assert_no_failure(result: pytest.RunResult) -> None:
    """No qmax test failed; on a busy host a rung the client could not time may leave Q_max a
    lower bound of the ladder, and the bracketing test then skips."""
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 2, result.stdout.str()
    assert not {"failed", "errors"} & outcomes.keys(), result.stdout.str()


def test_a_qmax_run_is_recorded_read_back_and_is_the_next_runs_baseline(
    pytester: pytest.Pytester,
    qmax_scenario: Path,
    serial_server: SerialStreamServer,
    store: MlflowClient,
) -> None:
    tracked = ("--tts-mlflow", "--tts-mlflow-experiment", "nightly")
    first = pytester.runpytest(*qmax_args(serial_server, pytester.path / "first"), *tracked)
    assert_no_failure(first)
    first.stdout.fnmatch_lines(["*mlflow: qmax run * in experiment 'nightly' at sqlite:///*"])
    path = only_artifact(pytester.path / "first")
    artifact = load(path, QmaxArtifact)

    [run] = runs_of(store, "nightly")
    assert run.info.status == "FINISHED"
    assert run.info.run_name == f"{serial_server.base_url} qmax"
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    assert tags["tts.step"] == "qmax"
    assert tags["tts.verdict"] == PASS
    assert params["slug"] == artifact.slug
    assert params["endpoint"] == serial_server.base_url
    assert params["slo_ms"] == "200.0"
    assert params["slo_metric"] == "ttfab"
    assert params["settings.ladder"] == "[1, 2, 3]"
    assert params["scenario"] == "none (built-in texts)"
    assert metrics["q_max"] == artifact.q_max == 2
    assert metrics["q_max_bracketed"] == float(artifact.q_max_bracketed)
    # Every rung's summaries, one point per rung at step = N.
    for name in ("ttfab_ms", "latency_ms"):
        for quantile in ("p50", "p95"):
            history = store.get_metric_history(run.info.run_id, f"rung.{name}.{quantile}")
            expected = [
                (r.concurrency, getattr(getattr(r, name), quantile)) for r in artifact.rungs
            ]
            assert sorted((m.step, m.value) for m in history) == sorted(expected)
    throughput = store.get_metric_history(run.info.run_id, "rung.throughput_rps")
    assert {m.step for m in throughput} == {r.concurrency for r in artifact.rungs} == {1, 2, 3}
    assert artifact_names(store, run) == {
        path.name,
        path.with_suffix(".html").name,
        path.with_name(path.stem + ".requests.jsonl").name,
        path.with_name(path.stem + ".inputs.jsonl").name,
    }
    kept = store.download_artifacts(run.info.run_id, path.name, str(pytester.path / "back"))
    assert Path(kept).read_bytes() == path.read_bytes()

    # The next run takes its baseline from the experiment's latest passing qmax run.
    again = pytester.runpytest(
        *qmax_args(serial_server, pytester.path / "again", *LOADED_MACHINE),
        *tracked,
        "--tts-baseline",
        "mlflow:experiment=nightly",
    )
    assert_no_failure(again)
    again.stdout.fnmatch_lines(["*qmax baseline: compare: no regression: * check(s)*"])
    first_run, second = runs_of(store, "nightly")
    assert first_run.info.run_id == run.info.run_id
    assert second.data.tags["tts.baseline"] == "baseline mlflow:experiment=nightly"
    assert second.data.metrics["baseline_regressions"] == 0.0
    assert second.data.tags["tts.verdict"] == PASS


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> int:
    """MLFLOW_TRACKING_URI names a port nothing listens on; the port."""
    port = closed_port()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    # MLflow retries a refused request for minutes by default.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    return port


def test_an_unreachable_tracking_server_costs_one_line_and_changes_no_verdict(
    tmp_path: Path,
    serial_server: SerialStreamServer,
    capsys: pytest.CaptureFixture[str],
    unreachable: int,
) -> None:
    port = unreachable
    out = tmp_path / "out"
    # A floor no run reaches: the gate fails the run, with or without MLflow.
    args = ["--endpoint-url", serial_server.base_url, *SHORT_LADDER, *SLO, "--min-qmax", "1000"]
    code = main(["qmax", *args, "--artifacts-dir", str(out), "--mlflow"])
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert "is below --tts-min-qmax (tts-bench: --min-qmax) 1000" in printed
    [line] = [line for line in printed.splitlines() if line.startswith("mlflow:")]
    assert line.startswith("mlflow: not recorded (the artifacts are kept): ")
    assert f"127.0.0.1:{port}" in line
    assert len(line) < 400
    path = only_artifact(out)
    assert load(path, QmaxArtifact).complete
    assert path.with_suffix(".html").is_file()


def test_under_pytest_an_unreachable_tracking_server_fails_no_test(
    pytester: pytest.Pytester,
    qmax_scenario: Path,
    serial_server: SerialStreamServer,
    unreachable: int,
) -> None:
    """The run is recorded as the session ends: its failure is a line of the summary, not an
    error of the last test; the --tts-min-qmax gate fails its test as it would anyway."""
    out = pytester.path / "out"
    result = pytester.runpytest(*qmax_args(serial_server, out, "--min-qmax", "1000", "--mlflow"))
    outcomes = result.parseoutcomes()
    assert "errors" not in outcomes, result.stdout.str()
    assert outcomes["failed"] >= 1
    result.stdout.fnmatch_lines(["*FAILED test_qmax.py::test_qmax_at_least_minimum*"])
    result.stdout.fnmatch_lines(
        [f"mlflow: not recorded (the artifacts are kept): *127.0.0.1:{unreachable}*"]
    )
    assert load(only_artifact(out), QmaxArtifact).complete


def test_a_plan_run_holds_the_thresholds_and_is_refused_as_a_qmax_baseline(
    tmp_path: Path, store: MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    tracked = ["--mlflow", "--mlflow-run-name", "release-1.4"]
    code = main(["plan", *PLAN_ARGS, *TRAFFIC, "--artifacts-dir", str(out), *tracked])
    printed = capsys.readouterr().out
    assert code == 0, printed
    plan = load(out / "plan-kokoro-82m.json", PlanArtifact)
    assert plan.policy is not None

    [run] = runs_of(store, "tts-scaling-kokoro-82m")
    assert run.info.run_name == "release-1.4 plan"
    tags, metrics = run.data.tags, run.data.metrics
    assert tags["tts.step"] == "plan"
    assert tags["tts.plan_verdict"] == plan.verdict
    assert tags["tts.verdict"] == PASS
    assert {f"tts.finding.{f.name}": f.verdict for f in plan.findings}.items() <= tags.items()
    assert metrics["scaling_target_value"] == plan.scaling_target_value
    assert metrics["scale_in_threshold"] == plan.scale_in_threshold
    assert metrics["scale_out_cooldown_s"] == plan.scale_out_cooldown_s
    assert metrics["scale_in_cooldown_s"] == plan.scale_in_cooldown_s
    assert metrics["max_instances"] == plan.max_instances
    assert metrics["policy.target_concurrency"] == plan.policy.target_concurrency
    assert run.data.params["inputs.peak_rps"] == "5000.0"
    assert artifact_names(store, run) == {"plan-kokoro-82m.json", "plan-kokoro-82m.html"}

    # A run of another step, or an experiment that does not exist, is no qmax baseline: refused
    # in one line before anything is measured (the URL below answers nothing).
    nowhere = f"http://127.0.0.1:{closed_port()}"
    for reference, said in [
        (f"mlflow:{run.info.run_id}", "holds no qmax artifact"),
        ("mlflow:experiment=missing", "MLflow has no experiment named 'missing'"),
        ("mlflow:experiment=tts-scaling-kokoro-82m", "has no finished qmax run with verdict"),
    ]:
        code = main(["qmax", "--endpoint-url", nowhere, "--baseline", reference])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith(f"tts-bench qmax: error: baseline {reference}: "), err
        assert said in err
        assert len(err.strip().splitlines()) == 1


def test_a_ttotal_run_holds_t_total_and_each_stage(tmp_path: Path, store: MlflowClient) -> None:
    path = tmp_path / TTOTAL_EXAMPLE.name  # the page is written beside it
    shutil.copy(TTOTAL_EXAMPLE, path)
    artifact = load(path, TtotalArtifact)
    tracking = TrackingInputs.from_options(RunOptions(mlflow=True, mlflow_experiment="scale-out"))
    [line] = record_ttotal(artifact, path, tracking, "speech-kokoro-82m")
    assert line.startswith("mlflow: ttotal run "), line

    [run] = runs_of(store, "scale-out")
    assert run.info.run_name == "speech-kokoro-82m ttotal"
    metrics = run.data.metrics
    assert metrics["t_total_s"] == artifact.t_total_s
    assert metrics["t_measured_s"] == artifact.t_measured_s
    assert metrics["policy_lag_bound_s"] == artifact.policy_lag_bound_s
    # The example holds each stage's time only: its seconds since desired_set are recorded.
    assert all(s.elapsed_s is None for s in artifact.stages)
    for stage in timed_stages(artifact):
        assert stage.elapsed_s is not None
        assert metrics[f"stage.{stage.stage}.elapsed_s"] == stage.elapsed_s
    assert metrics["stage.in_service.elapsed_s"] > metrics["stage.desired_set.elapsed_s"] == 0.0
    assert run.data.params["trigger"] == artifact.trigger
    assert artifact_names(store, run) == {path.name, path.with_suffix(".html").name}


def test_without_the_extra_the_line_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)
    path = tmp_path / TTOTAL_EXAMPLE.name
    shutil.copy(TTOTAL_EXAMPLE, path)
    tracking = TrackingInputs.from_options(RunOptions(mlflow=True))
    lines = record_ttotal(load(path, TtotalArtifact), path, tracking, "local")
    assert lines == [
        "mlflow: not recorded: this needs mlflow, which comes with the [mlflow] extra: expected "
        "it installed (pip install 'pytest-tts-scaling[mlflow]')"
    ]
    off = TrackingInputs.from_options(RunOptions())
    assert record_ttotal(load(path, TtotalArtifact), path, off, "local") == []


def test_a_rung_field_the_artifact_gains_is_recorded_without_a_change() -> None:
    """Per-rung figures are read off the rung: a newer artifact's clock and rates flow in."""
    data = json.loads(QMAX_EXAMPLE.read_text())
    for rung in data["rungs"]:
        rung["playback_ms"] = {**rung["ttfab_ms"], "p50": 11.0, "p95": 22.0}
        rung["chars_per_s"] = 12.5
        rung["errors_by_kind"] = {"http_503": 2}
    artifact = QmaxArtifact.model_validate(data)
    record = qmax_record(artifact, Verdict(PASS))
    points = {(m.key, m.step): m.value for m in record.metrics}
    rungs = {r.concurrency for r in artifact.rungs}
    for n in rungs:
        assert points[("rung.playback_ms.p50", n)] == 11.0
        assert points[("rung.playback_ms.p95", n)] == 22.0
        assert points[("rung.chars_per_s", n)] == 12.5
        assert points[("rung.errors_by_kind.http_503", n)] == 2.0
    assert points[("errors.http_503", 0)] == 2.0 * len(artifact.rungs)


@pytest.mark.parametrize("value", ["mlflow:", "mlflow:experiment=", "mlflow:two words"])
def test_a_malformed_mlflow_baseline_is_refused_naming_the_forms(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["qmax", "--baseline", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "expected a qmax artifact FILE, mlflow:RUN_ID or mlflow:experiment=NAME" in err


def test_a_plan_that_weighed_instance_types_records_each_candidate() -> None:
    from tests.test_plan_candidates import cpu, gpu, weigh

    plan = weigh(gpu(), cpu(0.5)).artifact
    assert plan.candidates is not None
    assert len(plan.candidates) == 2
    record = plan_record(plan, Verdict(PASS))
    values = {m.key: m.value for m in record.metrics}
    for candidate in plan.candidates:
        key = f"candidate.{candidate.slug}."
        assert values[key + "cost_per_day"] == candidate.cost_per_day
        assert values[key + "max_instances"] == candidate.max_instances
        assert values[key + "chosen"] == float(candidate.chosen)
        assert record.tags[f"tts.{key}why"] == candidate.why
