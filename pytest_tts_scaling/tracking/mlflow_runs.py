"""Each step's run in MLflow, through MLflow's own client, and a qmax baseline read back.

The client goes where MLflow itself resolves the tracking URI: ``MLFLOW_TRACKING_URI`` (a
tracking server, ``databricks``, or a SageMaker managed MLflow ARN where the ``sagemaker-mlflow``
plugin is installed), else MLflow's local default (``sqlite:///mlflow.db`` in the working
directory). ``mlflow`` is imported inside the functions: it comes with the [mlflow] extra.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tts_scaling.core.tracking import PASS, STEP_TAG, VERDICT_TAG, RunRecord
from pytest_tts_scaling.errors import InputError

if TYPE_CHECKING:
    from mlflow import MlflowClient

# The tag naming the run's artifact JSON, so a baseline is read back by name.
ARTIFACT_TAG = "tts.artifact"
# MLflow's log_batch takes at most 1000 metrics, 100 params and 100 tags per call.
BATCH_METRICS = 1000
BATCH_PARAMS = 100
BATCH_TAGS = 100
PREFIX = "mlflow:"
EXPERIMENT_PREFIX = "experiment="


def client_for() -> MlflowClient:
    from mlflow import MlflowClient

    return MlflowClient()


@contextmanager
def quiet() -> Iterator[None]:
    """MLflow's calls without the deprecation warnings its own dependencies raise (SQLAlchemy
    2.1 warns about MLflow's local store): nothing a user can act on, and an error where a
    project turns warnings into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def experiment_id(mlflow_client: MlflowClient, name: str) -> str:
    """The experiment's id, created when it does not exist yet (another run may create it at
    the same moment: then it is read again)."""
    from mlflow.exceptions import MlflowException

    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    try:
        return str(mlflow_client.create_experiment(name))
    except MlflowException:
        found = mlflow_client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


def record_run(
    record: RunRecord,
    files: Sequence[Path],
    *,
    experiment: str,
    run_name: str,
    client: MlflowClient | None = None,
) -> str:
    """Record one step's run with its files as artifacts; returns the MLflow run id.

    The run is marked FAILED when anything after its creation fails, and the error is raised.
    """
    with quiet():
        return _record_run(record, files, experiment, run_name, client or client_for())


def _record_run(
    record: RunRecord, files: Sequence[Path], experiment: str, run_name: str, client: MlflowClient
) -> str:
    from mlflow.entities import Metric, Param, RunTag

    tags = {**record.tags, ARTIFACT_TAG: files[0].name} if files else dict(record.tags)
    run = client.create_run(experiment_id(client, experiment), run_name=run_name)
    run_id = str(run.info.run_id)
    try:
        now = int(time.time() * 1000)
        metrics = [Metric(m.key, m.value, now, m.step) for m in record.metrics]
        params = [Param(k, v) for k, v in record.params.items()]
        run_tags = [RunTag(k, v) for k, v in tags.items()]
        for part in _chunks(metrics, BATCH_METRICS):
            client.log_batch(run_id, metrics=part)
        for part in _chunks(params, BATCH_PARAMS):
            client.log_batch(run_id, params=part)
        for part in _chunks(run_tags, BATCH_TAGS):
            client.log_batch(run_id, tags=part)
        for path in files:
            client.log_artifact(run_id, str(path))
    except BaseException:
        with suppress(Exception):  # the server may be gone: the first error is the one to tell
            client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED")
    return run_id


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def baseline_run_id(reference: str, client: MlflowClient) -> str:
    """The run a reference names: the run id itself, or the latest passing qmax run of the
    named experiment."""
    what = reference.removeprefix(PREFIX)
    if not what.startswith(EXPERIMENT_PREFIX):
        return what
    name = what.removeprefix(EXPERIMENT_PREFIX)
    found = client.get_experiment_by_name(name)
    if found is None:
        raise InputError(f"baseline {reference}: MLflow has no experiment named {name!r}")
    runs = client.search_runs(
        [str(found.experiment_id)],
        filter_string=f"tags.`{STEP_TAG}` = 'qmax' and tags.`{VERDICT_TAG}` = '{PASS}' "
        "and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise InputError(
            f"baseline {reference}: experiment {name!r} has no finished qmax run with verdict "
            f"{PASS!r}: expected one recorded with --mlflow"
        )
    return str(runs[0].info.run_id)


def download_baseline(reference: str, into: Path, client: MlflowClient | None = None) -> Path:
    """The qmax artifact JSON of the run a reference names, downloaded into `into`."""
    with quiet():
        return _download_baseline(reference, into, client or client_for())


def _download_baseline(reference: str, into: Path, client: MlflowClient) -> Path:
    run_id = baseline_run_id(reference, client)
    run = client.get_run(run_id)
    name = run.data.tags.get(ARTIFACT_TAG)
    if run.data.tags.get(STEP_TAG) != "qmax" or not name:
        raise InputError(
            f"baseline {reference}: run {run_id} holds no qmax artifact: expected a qmax run "
            "recorded with --mlflow"
        )
    return Path(client.download_artifacts(run_id, name, str(into)))


def tracking_uri() -> str:
    """Where MLflow's client goes: what MLflow itself resolves."""
    import mlflow

    return str(mlflow.get_tracking_uri())


def error_line(exc: BaseException) -> str:
    """An MLflow error (often a whole HTTP trace) as one line of at most 300 characters."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
    return line if len(line) <= 300 else line[:299] + "…"
