"""`speech-infra deploy|destroy MODEL`: the CDK CLI calls, their order, and failures."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from infra_helpers import INFRA
from speech_infra.cli import main

FAKE_CDK = "fake-cdk"


def command_lines(out: str) -> list[list[str]]:
    return [shlex.split(line) for line in out.splitlines() if line and not line.startswith("#")]


def stacks_of(lines: list[list[str]], verb: str) -> list[str]:
    assert all(line[:2] == [FAKE_CDK, verb] for line in lines), lines
    return [line[2] for line in lines]


def test_deploy_dry_run_prints_stacks_in_dependency_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["deploy", "kokoro-82m", "--dry-run", "--cdk", FAKE_CDK]) == 0
    lines = command_lines(capsys.readouterr().out)
    assert stacks_of(lines, "deploy") == [
        "SpeechFoundationStack",
        "SpeechModelCacheStack",
        "SpeechEndpointStack-kokoro-82m",
    ]
    assert all("--exclusively" in line for line in lines)


def test_destroy_dry_run_touches_only_the_endpoint_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["destroy", "kokoro-82m", "--dry-run", "--cdk", FAKE_CDK]) == 0
    lines = command_lines(capsys.readouterr().out)
    assert stacks_of(lines, "destroy") == ["SpeechEndpointStack-kokoro-82m"]


def test_destroy_with_shared_goes_in_reverse_dependency_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["destroy", "kokoro-82m", "--with-shared", "--dry-run", "--cdk", FAKE_CDK]) == 0
    lines = command_lines(capsys.readouterr().out)
    assert stacks_of(lines, "destroy") == [
        "SpeechEndpointStack-kokoro-82m",
        "SpeechModelCacheStack",
        "SpeechFoundationStack",
    ]


def test_options_are_passed_to_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["deploy", "kokoro-82m", "--dry-run", "--yes", "--profile", "ml", "--cdk", FAKE_CDK]
    argv += ["-c", "artifacts_dir=reports", "-c", "image_uri=123.dkr/x:1"]
    assert main(argv) == 0
    for line in command_lines(capsys.readouterr().out):
        assert line[3:] == [
            "--exclusively",
            "--require-approval",
            "never",
            "--app",
            shlex.join([sys.executable, "app.py"]),
            "--context",
            "artifacts_dir=reports",
            "--context",
            "image_uri=123.dkr/x:1",
            "--profile",
            "ml",
        ]


def test_destroy_yes_means_force(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["destroy", "kokoro-82m", "--dry-run", "--yes", "--cdk", FAKE_CDK]) == 0
    (line,) = command_lines(capsys.readouterr().out)
    assert "--force" in line


def test_unknown_model_exits_2_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "nope", "--dry-run"])
    assert exit_info.value.code == 2
    assert "unknown model 'nope'. Known models: kokoro-82m" in capsys.readouterr().err


def test_bad_context_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "kokoro-82m", "--dry-run", "-c", "novalue"])
    assert exit_info.value.code == 2
    assert "Could not parse value: 'novalue' (expected KEY=VALUE)" in capsys.readouterr().err


def test_missing_cdk_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "kokoro-82m", "--dry-run", "--app-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "no cdk.json in" in capsys.readouterr().err


def recorder(tmp_path: Path, fail_on: str | None = None) -> tuple[str, Path]:
    """A stand-in CDK CLI that appends its arguments and cwd to a log, failing on one stack."""
    log = tmp_path / "calls.log"
    script = tmp_path / "fake_cdk.py"
    script.write_text(
        "import os, sys\n"
        "line = ' '.join([os.getcwd(), *sys.argv[1:]])\n"
        f"with open({str(log)!r}, 'a') as f: f.write(line + '\\n')\n"
        f"sys.exit(3 if {fail_on!r} in sys.argv else 0)\n"
    )
    return shlex.join([sys.executable, str(script)]), log


def test_deploy_runs_each_step_in_the_app_directory(tmp_path: Path) -> None:
    cdk, log = recorder(tmp_path)
    assert main(["deploy", "kokoro-82m", "--cdk", cdk]) == 0
    calls = log.read_text().splitlines()
    assert [call.split()[:3] for call in calls] == [
        [str(INFRA), "deploy", "SpeechFoundationStack"],
        [str(INFRA), "deploy", "SpeechModelCacheStack"],
        [str(INFRA), "deploy", "SpeechEndpointStack-kokoro-82m"],
    ]


def test_a_failing_step_stops_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cdk, log = recorder(tmp_path, fail_on="SpeechModelCacheStack")
    assert main(["deploy", "kokoro-82m", "--cdk", cdk]) == 3
    assert len(log.read_text().splitlines()) == 2
    assert "step failed with exit code 3; later steps not run" in capsys.readouterr().err


def test_dry_run_runs_nothing(tmp_path: Path) -> None:
    cdk, log = recorder(tmp_path)
    assert main(["deploy", "kokoro-82m", "--dry-run", "--cdk", cdk]) == 0
    assert not log.exists()


def test_a_missing_cdk_cli_says_what_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["destroy", "kokoro-82m", "--cdk", "no-such-cdk-binary-here"]) == 127
    assert "install Node.js and the AWS CDK CLI" in capsys.readouterr().err


def test_help_lists_commands_and_models(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "deploy" in out
    assert "destroy" in out
    assert "Known models: kokoro-82m" in out
