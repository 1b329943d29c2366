"""Small words that read the right way: a mistyped flag, the plan's naive fleet size."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.cli import main


def test_a_mistyped_flag_gets_the_subcommands_usage_and_the_closest_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["qmax", "--ladr", "1,2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: tts-bench qmax ")
    assert err.rstrip().endswith(
        "tts-bench qmax: error: unrecognized arguments: --ladr 1,2; did you mean --ladder?"
    )
    with pytest.raises(SystemExit):
        main(["plan", "--peak-rsp=5"])
    assert "did you mean --peak-rps?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["qmax", "--zzzz"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzz" in err
    assert "did you mean" not in err


def test_the_naive_fleet_size_is_what_is_too_few() -> None:
    from tests.test_plan import finding, plan

    detail = finding(plan(), "fleet_cost").detail
    assert (
        "rps x S_mean / C_scale_max would give 9 instance(s), 28x too few: it assumes an "
        "instance completes C_scale_max / S_mean = 612/s, where it completes 20.137/s."
    ) in detail
