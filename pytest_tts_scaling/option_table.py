"""The option table: every flag of the plugin and of `tts-bench`, with the parser of its value.

The same table feeds pytest's option group and argparse, so `pytest -m qmax --tts-ladder …` and
`tts-bench qmax --ladder …` accept the same values and fail with the same messages. Under pytest
every option but `--endpoint` and `--endpoint-url` carries the `--tts-` prefix (the options live in
every pytest session of the environment, beside other plugins'); `tts-bench` owns its command line
and keeps the bare names. What the parsed values become is
:class:`~pytest_tts_scaling.options.RunOptions`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

from pytest_tts_scaling.core.defaults import DEFAULT_MODEL
from pytest_tts_scaling.core.spelling import pytest_flag
from pytest_tts_scaling.options import DEFAULT_SLO_MS, DEFAULT_SURGE_RATIO

N = TypeVar("N", int, float)


def _fail(value: str, expected: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"Could not parse value {value!r}: expected {expected}")


def _number(value: str, kind: Callable[[str], N], ok: Callable[[N], bool], expected: str) -> N:
    """The one number parser behind every numeric option: `kind(value)` that `ok` accepts."""
    try:
        parsed = kind(value)
    except ValueError:
        raise _fail(value, expected) from None
    if (isinstance(parsed, float) and not math.isfinite(parsed)) or not ok(parsed):
        raise _fail(value, expected)
    return parsed


def positive_float(value: str) -> float:
    return _number(value, float, lambda x: x > 0, "a positive number")


def non_negative_float(value: str) -> float:
    return _number(value, float, lambda x: x >= 0, "a number >= 0")


def positive_int(value: str) -> int:
    return _number(value, int, lambda x: x >= 1, "a whole number >= 1")


def non_negative_int(value: str) -> int:
    return _number(value, int, lambda x: x >= 0, "a whole number >= 0")


def ladder(value: str) -> tuple[int, ...]:
    """`1,5,10` → (1, 5, 10): strictly increasing whole numbers >= 1."""
    expected = "comma-separated whole numbers >= 1 in increasing order, e.g. 1,5,10,20"
    try:
        rungs = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise _fail(value, expected) from None
    if not rungs or rungs[0] < 1 or any(b <= a for a, b in pairwise(rungs)):
        raise _fail(value, expected)
    return rungs


def slo_ms(value: str) -> float | tuple[float, ...]:
    """`3000` → 3000.0; `1000,2000,3000` → SLO tiers (1000.0, 2000.0, 3000.0): distinct positive
    numbers, each bracketed by one run."""
    expected = "a positive number of ms, or distinct ones separated by commas, e.g. 1000,2000,3000"
    parts = value.split(",")
    tiers = tuple(_number(part, float, lambda x: x > 0, expected) for part in parts)
    if len(set(tiers)) != len(tiers):
        raise _fail(value, expected)
    return tiers[0] if len(tiers) == 1 else tuple(sorted(tiers))


def hourly_rps(value: str) -> tuple[float, ...]:
    """`0,0,...,5` → 24 rates >= 0, one per hour of a day."""
    expected = "24 comma-separated numbers >= 0, one per hour from midnight"
    rates = tuple(_number(part, float, lambda x: x >= 0, expected) for part in value.split(","))
    if len(rates) != 24:
        raise _fail(value, expected)
    return rates


def surge_ratio(value: str) -> float:
    return _number(value, float, lambda x: 1.0 <= x < 1.5, "a number in [1, 1.5)")


def endpoint_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise _fail(value, "an http:// or https:// URL")
    return value.rstrip("/")


def model_dir(value: str) -> Path:
    path = Path(value)
    if not path.is_dir():
        raise _fail(value, "a directory holding Kokoro's config.json, *.pth and voices/*.pt")
    return path


def endpoint_name(value: str) -> str:
    # SageMaker endpoint names: 1-63 of [a-zA-Z0-9-], not starting or ending with '-'.
    if not (
        0 < len(value) <= 63
        and value.replace("-", "").isalnum()
        and value.isascii()
        and not value.startswith("-")
        and not value.endswith("-")
    ):
        raise _fail(value, "a SageMaker endpoint name (1-63 letters, digits and '-')")
    return value


def baseline_source(value: str) -> Path | str:
    """A qmax artifact file, or a run kept in MLflow: `mlflow:RUN_ID`, `mlflow:experiment=NAME`."""
    if not value.startswith("mlflow:"):
        return Path(value)
    what = value.removeprefix("mlflow:")
    name = what.removeprefix("experiment=")
    if not name.strip() or (name == what and any(c.isspace() for c in what)):
        raise _fail(value, "a qmax artifact FILE, mlflow:RUN_ID or mlflow:experiment=NAME")
    return value


@dataclass(frozen=True)
class OptionSpec:
    flag: str
    dest: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    action: str | None = None

    @property
    def takes_value(self) -> bool:
        """A value follows the flag (a switch takes none)."""
        return self.action in (None, "append")

    def kwargs(self, spell: Callable[[str], str] = lambda flag: flag) -> dict[str, Any]:
        """argparse's keywords; `spell` names the other flags the help mentions."""
        # argparse expands %-formats in help: a plain "30%" must reach it as "30%%".
        text = self.help.format_map({"flag": _Spelled(spell)}).replace("%", "%%")
        out: dict[str, Any] = {"dest": self.dest, "help": text, "default": self.default}
        if self.action:
            out["action"] = self.action
        if self.takes_value:
            out["metavar"] = self.metavar
            if self.type is not None:
                out["type"] = self.type
            if self.choices is not None:
                out["choices"] = list(self.choices)
        return out


class _Spelled:
    """`{flag[baseline]}` in a help text → this front end's spelling of `--baseline`."""

    def __init__(self, spell: Callable[[str], str]) -> None:
        self.spell = spell

    def __getitem__(self, name: str) -> str:
        return self.spell(f"--{name}")


OPTION_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "--endpoint",
        "tts_endpoint",
        "SageMaker endpoint to measure. Default: none (a local container started by the plugin).",
        endpoint_name,
        None,
        "NAME",
    ),
    OptionSpec(
        "--endpoint-url",
        "tts_endpoint_url",
        "Any endpoint speaking the container's HTTP "
        "contract, e.g. http://127.0.0.1:8080. Default: none.",
        endpoint_url,
        None,
        "URL",
    ),
    OptionSpec(
        "--model-dir",
        "tts_model_dir",
        "Kokoro files for the local default endpoint (config.json, one *.pth, voices/*.pt), "
        "e.g. a download of hexgrad/Kokoro-82M. Default: none (the trained Kokoro-82M from the "
        "model packages; WEIGHTS=untrained for the development model).",
        model_dir,
        None,
        "DIR",
    ),
    OptionSpec(
        "--scenario",
        "tts_scenario",
        "Workload file (TOML): a path, or NAME for scenarios/NAME.toml. Options given here "
        "override its values. Default: none (built-in texts).",
        None,
        None,
        "NAME|PATH",
    ),
    OptionSpec(
        "--inference-component",
        "tts_inference_component",
        "Send requests to this inference component of the endpoint. Default: none.",
        None,
        None,
        "NAME",
    ),
    OptionSpec(
        "--model",
        "tts_model",
        f"Model name used in artifact names and the plan. Default: {DEFAULT_MODEL}.",
        None,
        None,
        "NAME",
    ),
    OptionSpec(
        "--transport",
        "tts_transport",
        "How requests are sent: response-stream (chunked "
        "HTTP / InvokeEndpointWithResponseStream) or bidi (WebSocket session). Default: "
        "response-stream.",
        None,
        None,
        "KIND",
        ("response-stream", "bidi"),
    ),
    OptionSpec(
        "--slo-ms",
        "tts_slo_ms",
        "p95 objective in ms, on the clock {flag[slo-metric]} names; several, comma-separated "
        "(1000,2000,3000), bracket Q_max at each tier from one run's shared rungs (the "
        f"artifact's slo_ms is the largest). Default: {DEFAULT_SLO_MS:g}.",
        slo_ms,
        None,
        "MS",
    ),
    OptionSpec(
        "--slo-metric",
        "tts_slo_metric",
        "The clock the SLO holds: ttfab (first audio byte), audible (first audible speech as a "
        "player starting at the first byte plays it) or playback (the earliest start from which "
        "playback never runs dry). The search, verdicts, baseline comparison and plan use it. "
        "Default: ttfab.",
        None,
        None,
        "CLOCK",
        ("ttfab", "audible", "playback"),
    ),
    OptionSpec(
        "--ladder",
        "tts_ladder",
        "Measure exactly these concurrency rungs (the published method's ladder is "
        "1,5,10,20,30,40,50,60). "
        "Default: none (adaptive search: N=1, then around the predicted SLO crossing, ending "
        "on N pass / N+1 fail).",
        ladder,
        None,
        "N,N,...",
    ),
    OptionSpec(
        "--max-concurrency",
        "tts_max_concurrency",
        "Highest concurrency the adaptive search may try; reaching it gives a lower bound. "
        "Default: 256 (about what one client process holds within 5 ms).",
        positive_int,
        None,
        "N",
    ),
    OptionSpec(
        "--hold-s",
        "tts_hold_s",
        "Seconds each rung is held. Default: 240 (local: 25).",
        positive_float,
        None,
        "S",
    ),
    OptionSpec(
        "--measure-s",
        "tts_measure_s",
        "Seconds at the end of each hold that are measured. Default: 60 (local: 15).",
        positive_float,
        None,
        "S",
    ),
    OptionSpec(
        "--gap-s",
        "tts_gap_s",
        "Idle seconds between rungs. Default: 30 (local: 2).",
        non_negative_float,
        None,
        "S",
    ),
    OptionSpec(
        "--runs",
        "tts_runs",
        "Repeat the whole ladder this many times; Q_max is the lowest. Default: 1.",
        positive_int,
        1,
        "N",
    ),
    OptionSpec(
        "--min-qmax",
        "tts_min_qmax",
        "Fail the qmax scenario when Q_max is below N. Default: no gate.",
        positive_int,
        None,
        "N",
    ),
    OptionSpec(
        "--fail-on-inconclusive",
        "tts_fail_on_inconclusive",
        "Fail the qmax step when its answer is inconclusive (the p95 interval of a rung it rests "
        "on still holds the SLO after extending): the CI gate. Default: off (a warning).",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--invocation-limit-s",
        "tts_invocation_limit_s",
        "Seconds a URL endpoint's first request may take before the endpoint is called silent: "
        "its invocation limit. A slower first answer than the rest is reported as a cold start "
        "and the run goes on. Default: 60 (SageMaker's limit).",
        type=positive_float,
        default=60.0,
        metavar="S",
    ),
    OptionSpec(
        "--no-confirm",
        "tts_no_confirm",
        "Report the search's answer without measuring its passing rung once more at the end "
        "(one rung less; a server that changed speed during the run then goes unnoticed). "
        "Default: off (confirmed).",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--dry-run",
        "tts_dry_run",
        "Print the schedule and its wall-clock estimate; send nothing. Default: off.",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--artifacts-dir",
        "tts_artifacts_dir",
        "Where artifacts are written and read. Default: reports.",
        Path,
        Path("reports"),
        "DIR",
    ),
    OptionSpec(
        "--allow-config-mismatch",
        "tts_allow_config_mismatch",
        "Accept artifacts measured "
        "on another configuration (a warning instead of a refusal). Default: off.",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--wer-sample",
        "tts_wer_sample",
        "Transcribe K answers of each rung after it (offline, pocketsphinx: the [quality] extra) "
        "and gate the rung on its word error rate too ({flag[max-wer]}, {flag[max-wer-increase]}). "
        "Default: 0 (off).",
        non_negative_int,
        0,
        "K",
    ),
    OptionSpec(
        "--max-wer",
        "tts_max_wer",
        "With {flag[wer-sample]}: the highest word error rate a passing rung may have (0.3: 3 "
        "words in 10 wrong). Default: none.",
        non_negative_float,
        None,
        "RATE",
    ),
    OptionSpec(
        "--max-wer-increase",
        "tts_max_wer_increase",
        "With {flag[wer-sample]}: how far a passing rung's word error rate may rise above the same "
        "texts' at N=1 (0.1 = 10 points). Default: 0.1.",
        non_negative_float,
        0.1,
        "RATE",
    ),
    OptionSpec(
        "--allow-shallow-queue",
        "tts_allow_shallow_queue",
        "Measure even when the endpoint's QUEUE_MAX_DEPTH is below the top rung. Default: off.",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--force",
        "tts_force",
        "Take over an endpoint another run holds frozen (its lock, or a snapshot it left); the "
        "restore then puts back what that run found. Default: off (refuse, naming the run).",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--export-csv",
        "tts_export_csv",
        "Also write each artifact's rungs and per-request records (ttotal: stages; plan: "
        "findings) as CSV into DIR, as `tts-bench export` does. Default: none.",
        Path,
        None,
        "DIR",
    ),
    OptionSpec(
        "--mlflow",
        "tts_mlflow",
        "Record each step's run in MLflow (the [mlflow] extra): parameters, metrics per rung, "
        "verdict and the artifacts, at the tracking URI MLflow resolves (MLFLOW_TRACKING_URI; "
        "else its local sqlite:///mlflow.db). A tracking server that cannot be reached costs "
        "one line, never the measurement. Default: off.",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--mlflow-experiment",
        "tts_mlflow_experiment",
        "With {flag[mlflow]}: the MLflow experiment the runs go to. Default: tts-scaling-MODEL.",
        None,
        None,
        "NAME",
    ),
    OptionSpec(
        "--mlflow-run-name",
        "tts_mlflow_run_name",
        "With {flag[mlflow]}: each run is named NAME STEP (e.g. NAME qmax). Default: the "
        "endpoint's name (a plan: its slug).",
        None,
        None,
        "NAME",
    ),
    OptionSpec(
        "--qmax-artifact",
        "tts_qmax_artifact",
        "qmax artifact for ttotal and plan; plan takes it again for each instance type it "
        "weighs by cost (see {flag[prices]}). Default: none.",
        Path,
        None,
        "FILE",
        action="append",
    ),
    OptionSpec(
        "--ttotal-artifact",
        "tts_ttotal_artifact",
        "ttotal artifact for plan; again for each instance type, paired with the qmax "
        "artifact of the same instance type and image. Default: none.",
        Path,
        None,
        "FILE",
        action="append",
    ),
    OptionSpec(
        "--prices",
        "tts_prices",
        "Price file (JSON or TOML: price_per_hour by instance type, with currency, region, "
        "as_of and source): plan weighs each measured instance type by cost and picks the "
        "cheapest that meets the SLO and the surge rule. Default: none.",
        Path,
        None,
        "FILE",
    ),
    OptionSpec(
        "--hourly-rps",
        "tts_hourly_rps",
        "A day of traffic for plan's costs: 24 comma-separated requests per second, one per "
        "hour from midnight. Default: none (a day from trough to peak and back).",
        hourly_rps,
        None,
        "R0,...,R23",
    ),
    OptionSpec(
        "--plan-artifact",
        "tts_plan_artifact",
        "plan artifact for validate. Default: none.",
        Path,
        None,
        "FILE",
    ),
    OptionSpec(
        "--surge-ratio",
        "tts_surge_ratio",
        "Growth the fleet absorbs within one T_total, "
        f"in [1, 1.5). Default: {DEFAULT_SURGE_RATIO}.",
        surge_ratio,
        DEFAULT_SURGE_RATIO,
        "S",
    ),
    OptionSpec(
        "--peak-rps",
        "tts_peak_rps",
        "Peak requests per second the fleet must serve. Default: none.",
        positive_float,
        None,
        "RPS",
    ),
    OptionSpec(
        "--trough-rps",
        "tts_trough_rps",
        "Quietest requests per second. Default: 0.",
        non_negative_float,
        0.0,
        "RPS",
    ),
    OptionSpec(
        "--min-floor", "tts_min_floor", "Smallest fleet allowed. Default: 1.", positive_int, 1, "N"
    ),
    OptionSpec(
        "--baseline",
        "tts_baseline",
        "Committed qmax artifact to hold this run against: fail when Q_max drops or p95 TTFAB "
        "at a common rung rises beyond the noise of the two runs. mlflow:RUN_ID reads the qmax "
        "artifact of that MLflow run; mlflow:experiment=NAME, of the experiment's latest qmax "
        "run whose verdict was pass. Default: none.",
        baseline_source,
        None,
        "FILE|mlflow:RUN",
    ),
    OptionSpec(
        "--regression-tolerance",
        "tts_regression_tolerance",
        "Factor on the rise of p95 TTFAB allowed against {flag[baseline]}: the noise of the two "
        "runs' p95 confidence intervals (or 5 percent / 5 ms, if more) times this; 0 fails on "
        "any rise, 2 suits shared CI runners. Default: 1.",
        non_negative_float,
        1.0,
        "F",
    ),
)


def add_to_argparse(parser: argparse.ArgumentParser | Any, specs: tuple[OptionSpec, ...]) -> None:
    """tts-bench's spelling: the table's flags as they are."""
    for spec in specs:
        parser.add_argument(spec.flag, **spec.kwargs())


def add_to_pytest(group: Any) -> None:
    """pytest's spelling: every table flag under the plugin's heading, `--tts-` prefixed."""
    for spec in OPTION_SPECS:
        group.addoption(pytest_flag(spec.flag), **spec.kwargs(pytest_flag))


def specs_named(*flags: str) -> tuple[OptionSpec, ...]:
    by_flag = {spec.flag: spec for spec in OPTION_SPECS}
    return tuple(by_flag[flag] for flag in flags)
