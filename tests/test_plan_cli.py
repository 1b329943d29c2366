"""`tts-bench plan` and `pytest -m plan`: output, exit codes, the artifact written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_tts_scaling.artifacts import load, save
from pytest_tts_scaling.cli import main
from pytest_tts_scaling.core.schema import PlanArtifact, QmaxArtifact
from tests.factories import EXAMPLES, QMAX_EXAMPLE, pytest_args

ROOT = Path(__file__).resolve().parents[1]
QMAX = QMAX_EXAMPLE
TTOTAL = EXAMPLES / "ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json"
EXAMPLE_TRAFFIC: list[str | Path] = ["--peak-rps", "5000", "--trough-rps", "10"]


def inputs(qmax: Path = QMAX) -> list[str | Path]:
    """The two artifacts and the traffic every plan here is made from."""
    return ["--qmax-artifact", qmax, "--ttotal-artifact", TTOTAL, *EXAMPLE_TRAFFIC]


@pytest.fixture
def stop_qmax(tmp_path: Path) -> Path:
    """The example with an SLO that does not fit SageMaker's 60 s limit: verdict stop."""
    artifact = load(QMAX, QmaxArtifact).model_copy(update={"slo_ms": 59990.0})
    return save(artifact, tmp_path / "inputs" / QMAX.name)


def plan_cli(*args: str | Path) -> int:
    return main(["plan", *(str(a) for a in args)])


def test_plan_prints_the_report_writes_the_artifact_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = plan_cli(
        *inputs(),
        "--artifacts-dir",
        tmp_path,
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "scaling_target_value             : 37.500" in out
    assert "scale_in_threshold               : 25.000" in out
    assert "surge_survival       warn" in out
    assert "scale_in_safety      warn" in out
    assert "verdict: warn" in out
    assert '"kokoro-82m": ModelEndpointConfig(\n' in out
    written = load(tmp_path / "plan-kokoro-82m.json", PlanArtifact)
    assert written.config_block in out
    assert written.max_instances == 249
    assert (tmp_path / "plan-kokoro-82m.json").read_text() == (
        EXAMPLES / "plan-kokoro-82m.json"
    ).read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_pytest_option_names_work_too(tmp_path: Path) -> None:
    args: list[str | Path] = [
        "--qmax-artifact",
        QMAX,
        "--ttotal-artifact",
        TTOTAL,
        *EXAMPLE_TRAFFIC,
    ]
    assert plan_cli(*args, "--artifacts-dir", tmp_path) == 0


def test_artifacts_elsewhere_give_the_same_bytes(tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for source in (QMAX, TTOTAL):
        shutil.copy(source, moved / source.name)
    args: list[str | Path] = [
        "--qmax-artifact",
        moved / QMAX.name,
        "--ttotal-artifact",
        moved / TTOTAL.name,
        *EXAMPLE_TRAFFIC,
    ]
    assert plan_cli(*args, "--artifacts-dir", tmp_path / "out") == 0
    assert (tmp_path / "out" / "plan-kokoro-82m.json").read_bytes() == (
        EXAMPLES / "plan-kokoro-82m.json"
    ).read_bytes()


def test_a_stop_plan_exits_1_and_is_still_written(
    tmp_path: Path, stop_qmax: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = plan_cli(
        *inputs(stop_qmax),
        "--artifacts-dir",
        tmp_path,
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "plan: FAIL: verdict stop (invocation_ceiling)" in out
    assert json.loads((tmp_path / "plan-kokoro-82m.json").read_text())["verdict"] == "stop"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--ttotal-artifact", TTOTAL, *EXAMPLE_TRAFFIC],
            "plan needs --tts-qmax-artifact (tts-bench: --qmax-artifact) FILE:",
        ),
        (["--qmax-artifact", QMAX, "--ttotal-artifact", TTOTAL], "--peak-rps) is required"),
        (["--qmax-artifact", QMAX, "--ttotal-artifact", QMAX, *EXAMPLE_TRAFFIC], "field 'schema'"),
        (
            [
                "--qmax-artifact",
                EXAMPLES / "missing.json",
                "--ttotal-artifact",
                TTOTAL,
                *EXAMPLE_TRAFFIC,
            ],
            "no such artifact",
        ),
        (
            [
                *inputs(),
                "--slo-ms",
                "2500",
            ],
            "differs",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str | Path], message: str
) -> None:
    assert plan_cli(*args, "--artifacts-dir", tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tts-bench plan: error: ")
    assert message in err
    assert "\n" not in err
    assert not (tmp_path / "plan-kokoro-82m.json").exists()


def test_a_surge_ratio_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        plan_cli(
            *inputs(),
            "--surge-ratio",
            "1.5",
        )
    assert caught.value.code == 2
    assert "expected a number in [1, 1.5)" in capsys.readouterr().err


def test_console_script_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_tts_scaling.cli",
            "plan",
            "--qmax-artifact",
            str(QMAX),
            "--ttotal-artifact",
            str(TTOTAL),
            *EXAMPLE_TRAFFIC,
            "--artifacts-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ModelEndpointConfig(" in result.stdout


# --- pytest -m plan --------------------------------------------------------------------------


SCENARIO = (ROOT / "scenarios" / "test_plan.py").read_text(encoding="utf-8")


def run_scenario(pytester: pytest.Pytester, *args: str | Path) -> pytest.RunResult:
    pytester.makepyfile(test_plan_scenario=SCENARIO)
    return pytester.runpytest(
        "-p", "no:cacheprovider", "-m", "plan", *pytest_args(*(str(a) for a in args))
    )


def test_scenario_passes_and_writes_the_plan(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = run_scenario(
        pytester,
        *inputs(),
        "--artifacts-dir",
        tmp_path,
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*plan warn: target 37.5, scale-in 25*instances 1..249*",
            "*plan warn: surge_survival:*",
            "*plan warn: scale_in_safety:*",
        ]
    )
    assert load(tmp_path / "plan-kokoro-82m.json", PlanArtifact).verdict == "warn"


def test_scenario_fails_naming_each_stop(
    pytester: pytest.Pytester, tmp_path: Path, stop_qmax: Path
) -> None:
    result = run_scenario(
        pytester,
        *inputs(stop_qmax),
        "--artifacts-dir",
        tmp_path,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*plan verdict stop: invocation_ceiling: SLO + S_p95*"])
    assert result.ret == 1


def test_scenario_fails_without_artifacts(pytester: pytest.Pytester) -> None:
    result = run_scenario(pytester, *EXAMPLE_TRAFFIC)
    result.assert_outcomes(failed=1)
    both = "--tts-qmax-artifact (tts-bench: --qmax-artifact) FILE and --tts-ttotal-artifact"
    result.stdout.fnmatch_lines([f"*plan needs {both}*"])


def test_scenario_weighs_two_instance_types(pytester: pytest.Pytester, tmp_path: Path) -> None:
    from tests.test_plan_candidates import PRICE_FILE, cpu

    c = cpu(0.2)
    q_cpu = save(c.qmax, tmp_path / "in" / "qmax-cpu.json")
    t_cpu = save(c.ttotal, tmp_path / "in" / "ttotal-cpu.json")
    result = run_scenario(
        pytester,
        *inputs(),
        *("--qmax-artifact", q_cpu, "--ttotal-artifact", t_cpu, "--prices", PRICE_FILE),
        "--artifacts-dir",
        tmp_path / "out",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*plan warn: target 37.5, scale-in 25*instances 3..1242*", "*plan: * ml.c5.xlarge *"]
    )
    written = load(tmp_path / "out" / "plan-kokoro-82m.json", PlanArtifact)
    assert [c.chosen for c in written.candidates or ()] == [False, True]
