"""`tts-bench validate-live`: the step's checks, one line each, and its exit codes.

The rehearsal itself runs end to end under pytest (tests/test_fleet_validate_live.py); here the
step is given made-up checks so the command's words and codes are what is tested.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_tts_scaling import cli
from pytest_tts_scaling.core.live import Check
from pytest_tts_scaling.steps import validate_live
from pytest_tts_scaling.steps.deployed import ValidateLiveInputs


def given(monkeypatch: pytest.MonkeyPatch, found: dict[str, Check]) -> list[ValidateLiveInputs]:
    seen: list[ValidateLiveInputs] = []

    def run(inputs: ValidateLiveInputs, progress: Any) -> str:
        seen.append(inputs)
        return "the run"

    monkeypatch.setattr(validate_live, "run_validate_live", run)
    monkeypatch.setattr(validate_live, "checks", lambda run: found)
    return seen


def test_every_check_holds_exit_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = given(monkeypatch, {"steady_p95": Check(True, "p95 300 ms <= 420 ms")})
    assert cli.main(["validate-live", "--endpoint", "speech-x", "--plan-artifact", "p.json"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "validate_live: steady_p95: ok: p95 300 ms <= 420 ms",
        "validate_live: 1 of 1 checks hold",
    ]
    assert seen[0].target.endpoint == "speech-x"
    assert str(seen[0].plan_artifact) == "p.json"


def test_a_failed_check_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    given(monkeypatch, {"a": Check(True, "fine"), "scale_in": Check(False, "too early")})
    assert cli.main(["validate-live"]) == 1
    out = capsys.readouterr().out
    assert "validate_live: scale_in: FAILED: too early" in out
    assert out.endswith("validate_live: 1 of 2 checks hold\n")


def test_a_plain_url_is_refused_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate-live", "--endpoint-url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tts-bench validate-live: error: --endpoint-url: a plain URL has no ")
    assert err.count("\n") == 1
