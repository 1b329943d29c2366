from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from pytest_tts_scaling.option_table import (
    endpoint_name,
    ladder,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    surge_ratio,
)
from pytest_tts_scaling.options import LOCAL_LADDER, METHOD_LADDER, RunOptions


def test_ladder_parses_and_rejects() -> None:
    assert ladder("1,5,10") == (1, 5, 10)
    for bad in ("", "0,1", "5,1", "1,1", "a,b", "1,,2"):
        with pytest.raises(argparse.ArgumentTypeError, match="increasing"):
            ladder(bad)


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "x"])
def test_positive_float_rejects(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="positive number"):
        positive_float(bad)


@pytest.mark.parametrize(
    ("parse", "good", "bad", "expected"),
    [
        (non_negative_float, {"0": 0.0, "2.5": 2.5}, ["-0.1", "nan", "-inf", "x"], "a number >= 0"),
        (positive_int, {"1": 1, "32": 32}, ["0", "-3", "1.5", "x"], "a whole number >= 1"),
        (non_negative_int, {"0": 0, "7": 7}, ["-1", "2.0", ""], "a whole number >= 0"),
    ],
)
def test_each_number_option_parses_or_names_what_it_expected(
    parse: Any, good: dict[str, float], bad: list[str], expected: str
) -> None:
    assert {value: parse(value) for value in good} == good
    for value in bad:
        with pytest.raises(argparse.ArgumentTypeError) as failed:
            parse(value)
        assert str(failed.value) == f"Could not parse value {value!r}: expected {expected}"


@pytest.mark.parametrize("bad", ["0.99", "1.5", "2", "x", "nan"])
def test_surge_ratio_range(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"\[1, 1.5\)"):
        surge_ratio(bad)


def test_endpoint_name() -> None:
    assert endpoint_name("speech-kokoro-82m") == "speech-kokoro-82m"
    for bad in ("-x", "x-", "a_b", "x" * 64, ""):
        with pytest.raises(argparse.ArgumentTypeError, match="SageMaker endpoint name"):
            endpoint_name(bad)


def test_defaults_depend_on_endpoint_kind() -> None:
    local = RunOptions().for_kind()
    assert local.ladder is None  # the adaptive search
    assert local.max_concurrency == 256
    assert local.hold_s == LOCAL_LADDER.hold_s
    remote = RunOptions(endpoint="speech-kokoro-82m").for_kind()
    assert remote.ladder is None
    assert remote.hold_s == METHOD_LADDER.hold_s
    assert (remote.hold_s, remote.measure_s, remote.gap_s) == (240.0, 60.0, 30.0)
    assert remote.slo_ms == 3000.0
    custom = RunOptions(ladder=(1, 2), hold_s=10, measure_s=6, gap_s=0).for_kind()
    assert (custom.ladder, custom.hold_s, custom.measure_s, custom.gap_s) == ((1, 2), 10, 6, 0)


def test_measure_longer_than_hold_is_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"--measure-s\) 20 is longer"):
        RunOptions(hold_s=10, measure_s=20).for_kind()


def test_from_namespace_maps_dests_and_refuses_two_endpoints() -> None:
    options = RunOptions.from_namespace({"tts_ladder": (1, 2), "tts_artifacts_dir": Path("x")})
    assert options.ladder == (1, 2)
    assert options.artifacts_dir == Path("x")
    with pytest.raises(argparse.ArgumentTypeError, match="at most one"):
        RunOptions.from_namespace({"tts_endpoint": "a", "tts_endpoint_url": "http://x"})
