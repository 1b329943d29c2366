"""The regression rule (`pytest_tts_scaling.core.compare`) and `tts-bench compare`."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from pytest_tts_scaling.artifacts import load, save
from pytest_tts_scaling.cli import main
from pytest_tts_scaling.core.compare import Comparison, compare_qmax
from pytest_tts_scaling.core.schema import (
    DeployedConfig,
    Interval,
    QmaxArtifact,
    Rung,
    Summary,
)
from pytest_tts_scaling.core.stats import quantile_ci, summarize
from pytest_tts_scaling.errors import InputError, MismatchError
from tests.factories import QMAX_EXAMPLE, make_qmax, make_rung

Z95 = NormalDist().inv_cdf(0.975)


def rung(
    concurrency: int,
    p95: float,
    half: float | None = None,
    *,
    slo_ms: float = 1000.0,
    usable: bool = True,
    reason: str | None = None,
    count: int = 200,
) -> Rung:
    """A rung whose p95 has a symmetric 95% interval of +-half ms (half=None: no interval)."""
    ttfab = Summary(
        count=count,
        mean=p95 * 0.8,
        min=p95 * 0.5,
        max=p95 * 1.2,
        std=p95 * 0.1,
        p50=p95 * 0.8,
        p90=p95 * 0.95,
        p95=p95,
        p99=p95 * 1.1,
    )
    return make_rung(
        concurrency,
        meets_slo=usable and p95 <= slo_ms,
        usable=usable,
        unusable_reason=reason,
        completed=count,
        measure_s=60.0,
        throughput_rps=count / 60.0,
        ttfab_ms=ttfab,
        latency_ms=ttfab,
        ttfab_p95_ci_ms=None if half is None else Interval(low=p95 - half, high=p95 + half),
    )


def artifact(rungs: list[Rung], q_max: int | None, **update: object) -> QmaxArtifact:
    fields: dict[str, object] = {
        "endpoint": "speech-kokoro-82m",
        "slug": "g5xlarge-8b1b96bc",
        "deployed_config": DeployedConfig(instance_type="ml.g5.xlarge", image_digest="sha256:8b1b"),
        "slo_ms": 1000.0,
        "q_max_bracketed": True,
        "s_mean_s": 0.06,
        "s_p95_s": 0.066,
        "ttfab_p95_at_c1_ms": 65.0,
    }
    return make_qmax(rungs, q_max, **{**fields, **update})


def ladder(*p95s: float, half: float = 20.0) -> list[Rung]:
    """Rungs N = 1, 2, 3, ... with these p95 TTFABs (ms)."""
    return [rung(n, p95, half) for n, p95 in enumerate(p95s, start=1)]


def by_name(comparison: Comparison) -> dict[str, str]:
    return {c.name: c.status for c in comparison.checks}


def test_an_artifact_equals_itself() -> None:
    base = artifact(ladder(100, 400, 800, 1200), q_max=3)
    result = compare_qmax(base, base)
    assert result.ok
    assert by_name(result) == {
        "q_max": "ok",
        "ttfab_p95@N=1": "ok",
        "ttfab_p95@N=2": "ok",
        "ttfab_p95@N=3": "ok",
        "ttfab_p95@N=4": "ok",
    }
    assert result.lines()[-1].startswith("compare: no regression: 5 check(s)")


def test_threshold_is_noise_of_both_intervals_with_a_bonferroni_z() -> None:
    # se = half / z_0.975 = 100 ms on each side; 2 rungs compared: z = inv_cdf(1 - 0.05/2).
    half = 100 * Z95
    base = artifact([rung(1, 100, half), rung(2, 1000, half, slo_ms=2000)], q_max=2)
    new = artifact([rung(1, 100, half), rung(2, 1200, half, slo_ms=2000)], q_max=2)
    result = compare_qmax(
        base.model_copy(update={"slo_ms": 2000.0}), new.model_copy(update={"slo_ms": 2000.0})
    )
    z = NormalDist().inv_cdf(1 - 0.05 / 2)
    assert result.z == pytest.approx(z)
    noise = z * math.sqrt(100**2 + 100**2)  # 316.9 ms, above the 5% floor of 50 ms
    check = next(c for c in result.checks if c.name == "ttfab_p95@N=2")
    assert check.threshold == pytest.approx(1000 + noise)
    assert check.status == "ok"  # +200 ms is within the noise of the two runs
    # Half the tolerance, half the allowance: +200 ms is now beyond it.
    strict = compare_qmax(
        base.model_copy(update={"slo_ms": 2000.0}),
        new.model_copy(update={"slo_ms": 2000.0}),
        tolerance=0.5,
    )
    check = next(c for c in strict.checks if c.name == "ttfab_p95@N=2")
    assert check.threshold == pytest.approx(1000 + 0.5 * noise)
    assert check.status == "regressed"
    assert not strict.ok


def test_more_rungs_compared_means_a_larger_z() -> None:
    two = compare_qmax(artifact(ladder(100, 200), 2), artifact(ladder(100, 200), 2))
    eight = compare_qmax(
        artifact(ladder(*range(100, 900, 100)), 8), artifact(ladder(*range(100, 900, 100)), 8)
    )
    assert two.z is not None
    assert eight.z is not None
    assert eight.z == pytest.approx(NormalDist().inv_cdf(1 - 0.05 / 8))
    assert eight.z > two.z


def test_within_noise_passes_and_a_rise_beyond_it_fails_naming_the_rung() -> None:
    base = artifact(ladder(100, 400, 800), q_max=3)
    within = artifact(ladder(100, 410, 800), q_max=3)  # +10 ms: below the 5% floor of 20 ms
    assert compare_qmax(base, within).ok
    risen = artifact(ladder(100, 480, 800), q_max=3)
    result = compare_qmax(base, risen)
    [failed] = result.regressions
    assert failed.name == "ttfab_p95@N=2"
    # se 20/1.96 each side, z for 3 rungs: noise 2.39 * 14.4 = 34.5 ms > floor 20 ms.
    noise = NormalDist().inv_cdf(1 - 0.05 / 3) * math.hypot(20 / Z95, 20 / Z95)
    assert failed.threshold == pytest.approx(400 + noise)
    assert failed.line() == (
        f"REGRESSION ttfab_p95@N=2: baseline 400.0 ms, new 480.0 ms, threshold <= "
        f"{400 + noise:.1f} ms (+80.0 ms; allowance 1 x max(noise {noise:.1f} ms, floor 20.0 ms) "
        f"= {noise:.1f} ms)"
    )
    assert "REGRESSION in 1 of 4 check(s) (ttfab_p95@N=2)" in result.verdict_line()


def test_the_floor_holds_when_intervals_are_tiny() -> None:
    base = artifact(ladder(100, 400, half=0.01), q_max=2)
    jitter = artifact(ladder(101, 415, half=0.01), q_max=2)  # +1 ms, +15 ms: within 5 ms / 5%
    assert compare_qmax(base, jitter).ok
    worse = artifact(ladder(106, 400, half=0.01), q_max=2)  # +6 ms at 100 ms: above 5 ms
    assert [c.name for c in compare_qmax(base, worse).regressions] == ["ttfab_p95@N=1"]
    assert compare_qmax(base, worse, tolerance=2.0).ok  # allowance 2 x 5 ms
    assert not compare_qmax(base, jitter, tolerance=0).ok  # no allowance: any rise fails


def test_improvements_are_reported_and_pass() -> None:
    base = artifact(ladder(100, 400, 800, 1200), q_max=3)
    better = artifact(ladder(100, 300, 600, 900), q_max=4)
    result = compare_qmax(base, better)
    assert result.ok
    assert by_name(result) == {
        "q_max": "improved",
        "ttfab_p95@N=1": "ok",
        "ttfab_p95@N=2": "improved",
        "ttfab_p95@N=3": "improved",
        "ttfab_p95@N=4": "improved",
    }


def test_a_lower_qmax_fails_with_baseline_new_and_threshold() -> None:
    base = artifact(ladder(100, 400, 800, 1200), q_max=3)
    # Same latencies, but rung 3 failed its SLO this time (say, the SLO straddled).
    rungs = ladder(100, 400, 800, 1200)
    rungs[2] = rungs[2].model_copy(update={"meets_slo": False})
    result = compare_qmax(base, artifact(rungs, q_max=2))
    [failed] = result.regressions
    assert failed.name == "q_max"
    assert failed.line().startswith("REGRESSION q_max: baseline 3, new 2, threshold >= 3 (")
    assert "rung N=3 had p95 TTFAB 800.0 ms > SLO 1000 ms" in failed.detail


def test_a_qmax_decided_inside_the_interval_is_called_inconclusive() -> None:
    base = artifact(ladder(100, 400, 800, 1200), q_max=3)
    rungs = ladder(100, 400, 1010, 1200, half=30)
    result = compare_qmax(base, artifact(rungs, q_max=2))
    assert (
        "inconclusive: its p95 interval 980.0-1040.0 ms holds the SLO"
        in result.regressions[0].detail
    )


def test_no_qmax_at_all_is_a_regression() -> None:
    base = artifact(ladder(100, 400), q_max=2)
    new = artifact([rung(1, 1500), rung(2, 1900)], q_max=None)
    assert [c.line().split(":")[0] for c in compare_qmax(base, new).regressions] == [
        "REGRESSION q_max",
        "REGRESSION ttfab_p95@N=1",
        "REGRESSION ttfab_p95@N=2",
    ]
    assert "found no rung within the SLO" in compare_qmax(base, new).regressions[0].detail


def test_a_ladder_that_stopped_below_the_baseline_qmax_cannot_pass() -> None:
    base = artifact(ladder(100, 200, 300, 400, 500), q_max=5)
    short = artifact(ladder(100, 200, 300), q_max=3, q_max_bracketed=False)
    [failed] = compare_qmax(base, short).regressions
    assert failed.name == "q_max"
    assert "extend --tts-ladder (tts-bench: --ladder) to at least 5" in failed.detail


def test_rungs_that_cannot_be_compared_are_skipped_with_the_reason() -> None:
    base = artifact([*ladder(100, 400), rung(4, 900)], q_max=4)
    new_rungs = [
        rung(1, 100, 20),
        rung(2, 5000, usable=False, reason="not_settled"),
        rung(3, 700, 20),
        rung(4, 900, 20),
    ]
    result = compare_qmax(base, artifact(new_rungs, q_max=4))
    assert by_name(result)["ttfab_p95@N=2"] == "skipped"
    lines = result.lines()
    assert "skipped ttfab_p95@N=2: new rung unusable (not_settled)" in lines
    assert "skipped ttfab_p95@N=3: measured only by the new run" in lines
    assert result.ok


def test_no_common_usable_rung_is_a_warning() -> None:
    result = compare_qmax(artifact(ladder(100, 200), 2), artifact([rung(5, 100), rung(6, 200)], 6))
    assert result.z is None
    assert any("p95 TTFAB was not compared" in w for w in result.warnings)
    assert result.ok  # Q_max 6 >= 2


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("slug", "g4dnxlarge-00000000", "'g4dnxlarge-00000000'"),
        ("transport", "bidi", "'bidi'"),
        ("slo_ms", 2000.0, "2000"),
        ("model", "other-model", "'other-model'"),
    ],
)
def test_another_configuration_is_refused_naming_the_field(
    field: str, value: object, shown: str
) -> None:
    base = artifact(ladder(100, 400), q_max=2)
    other = base.model_copy(update={field: value})
    with pytest.raises(
        MismatchError, match=f"field '{field}': baseline has .*, new run has {shown}"
    ):
        compare_qmax(base, other)
    allowed = compare_qmax(base, other, allow_config_mismatch=True)
    assert allowed.ok
    assert len(allowed.warnings) == 1
    assert f"field '{field}'" in allowed.warnings[0]
    assert (
        "accepted by --tts-allow-config-mismatch (tts-bench: --allow-config-mismatch)"
        in allowed.lines()[0]
    )


def test_an_interrupted_baseline_is_refused_and_an_interrupted_run_warned_about() -> None:
    base = artifact(ladder(100, 400), q_max=2)
    partial = base.model_copy(update={"complete": False, "stop_reason": "measuring"})
    with pytest.raises(InputError, match=r"field 'complete': false .*expected a complete"):
        compare_qmax(partial, base)
    assert compare_qmax(base, partial).warnings == (
        "new run is an interrupted run: its Q_max may be too low",
    )


def test_a_negative_tolerance_is_refused() -> None:
    base = artifact(ladder(100), q_max=1)
    with pytest.raises(InputError, match="--regression-tolerance -1: expected a number >= 0"):
        compare_qmax(base, base, tolerance=-1)


def test_without_intervals_the_noise_comes_from_the_summary() -> None:
    example = load(QMAX_EXAMPLE, QmaxArtifact)  # the source's numbers carry no p95 intervals
    assert all(r.ttfab_p95_ci_ms is None for r in example.rungs)
    result = compare_qmax(example, example)
    assert result.ok
    at_50 = next(c for c in result.checks if c.name == "ttfab_p95@N=50")
    r50 = next(r for r in example.rungs if r.concurrency == 50)
    s = r50.ttfab_ms
    assert s.p90 is not None
    assert s.p99 is not None
    assert s.count is not None
    se = math.sqrt(0.95 * 0.05 / s.count) * (s.p99 - s.p90) / 0.09
    noise = NormalDist().inv_cdf(1 - 0.05 / 8) * math.hypot(se, se)
    assert f"noise {noise:.1f} ms" in at_50.detail
    # Its Q_max and the rungs moved by the example's own spread are both caught.
    slower = example.model_copy(
        update={
            "q_max": 40,
            "rungs": [
                r.model_copy(
                    update={
                        "ttfab_ms": r.ttfab_ms.model_copy(
                            update={"p95": (r.ttfab_ms.p95 or 0) * 1.2}
                        )
                    }
                )
                for r in example.rungs
            ],
        }
    )
    failed = {c.name for c in compare_qmax(example, slower).regressions}
    assert failed == {"q_max"} | {f"ttfab_p95@N={r.concurrency}" for r in example.rungs}


def _measured_ladder(rng: np.random.Generator, scale: float, n: int = 80) -> list[Rung]:
    """Eight rungs of lognormal TTFAB samples, summarized as the ladder does."""
    rungs = []
    for c in range(1, 9):
        samples = rng.lognormal(mean=math.log(100.0 * c), sigma=0.3, size=n) * scale
        ttfab = summarize(samples.tolist())
        rungs.append(
            rung(c, 0.0, slo_ms=1e9).model_copy(
                update={"ttfab_ms": ttfab, "ttfab_p95_ci_ms": quantile_ci(samples)}
            )
        )
    return rungs


def test_false_alarms_stay_rare_and_real_rises_are_caught() -> None:
    """Calibration of the rule on simulated runs: no change vs a 40% slower server."""
    rng = np.random.default_rng(20260115)
    trials = 150
    false_alarms = caught = 0
    for _ in range(trials):
        base = artifact(_measured_ladder(rng, 1.0), q_max=8)
        same = artifact(_measured_ladder(rng, 1.0), q_max=8)
        slower = artifact(_measured_ladder(rng, 1.4), q_max=8)
        false_alarms += not compare_qmax(base, same).ok
        caught += not compare_qmax(base, slower).ok
    # Bonferroni over 8 rungs keeps the chance of any false flag near or below 5%.
    assert false_alarms / trials <= 0.08
    assert caught / trials >= 0.9


# --- tts-bench compare ----------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    base = artifact(ladder(100, 400, 800), q_max=3)
    return save(base, tmp_path / "base.json"), tmp_path / "new.json"


def test_compare_command_exit_0_when_nothing_regressed(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = files
    save(artifact(ladder(100, 405, 790), q_max=3), new)
    assert main(["compare", str(base), str(new)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "ok q_max: baseline 3, new 3, threshold >= 3 (same Q_max)"
    assert out[-1].startswith(
        f"compare: no regression: 4 check(s) of {new} against baseline {base}"
    )


def test_compare_command_exit_1_prints_each_failing_check(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = files
    rungs = ladder(100, 520, 1100)
    save(artifact(rungs, q_max=2), new)
    assert main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION q_max: baseline 3, new 2, threshold >= 3" in out
    assert "REGRESSION ttfab_p95@N=2: baseline 400.0 ms, new 520.0 ms, threshold <= " in out
    assert "REGRESSION ttfab_p95@N=3: baseline 800.0 ms, new 1100.0 ms, threshold <= " in out
    assert "compare: REGRESSION in 3 of 4 check(s)" in out
    # A tolerance wide enough for the latencies leaves Q_max failing: it has no allowance.
    assert main(["compare", str(base), str(new), "--regression-tolerance", "100"]) == 1
    assert "REGRESSION in 1 of 4 check(s) (q_max)" in capsys.readouterr().out


def test_compare_command_exit_2_on_a_mismatch_or_a_bad_file(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = files
    save(artifact(ladder(100, 400, 800), q_max=3, slug="g4dnxlarge-0badf00d"), new)
    assert main(["compare", str(base), str(new)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        f"tts-bench compare: error: field 'slug': baseline {base} has 'g5xlarge-8b1b96bc', "
        f"{new} has 'g4dnxlarge-0badf00d'"
    )
    assert main(["compare", str(base), str(new), "--allow-config-mismatch"]) == 0
    assert "compare: warning: field 'slug'" in capsys.readouterr().out
    assert main(["compare", str(base), str(base.with_name("missing.json"))]) == 2
    assert "missing.json: no such artifact file" in capsys.readouterr().err
    new.write_text('{"schema": "tts-scaling/qmax/1", "model": "x"}')
    assert main(["compare", str(base), str(new)]) == 2
    assert "field 'endpoint'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(base), str(new), "--regression-tolerance", "-1"])
    assert exc.value.code == 2


def open_above(r: Rung) -> Rung:
    """The rung as a thin sample leaves it: its p95 interval has no upper bound."""
    assert r.ttfab_p95_ci_ms is not None
    interval = r.ttfab_p95_ci_ms.model_copy(update={"bounded_above": False})
    return r.model_copy(update={"ttfab_p95_ci_ms": interval})


def test_a_baseline_rung_open_above_cannot_show_a_rise_and_says_so() -> None:
    thin = ladder(100, 400)
    thin[1] = open_above(thin[1])
    base = artifact(thin, q_max=2)
    risen = artifact(ladder(100, 900), q_max=2)
    checks = {c.name: c for c in compare_qmax(base, risen).checks}
    assert checks["ttfab_p95@N=2"].status == "skipped"
    assert "open above" in checks["ttfab_p95@N=2"].detail


def test_a_new_rung_open_above_is_not_called_an_improvement() -> None:
    base = artifact(ladder(100, 400), q_max=2)
    thin = ladder(100, 300)
    thin[1] = open_above(thin[1])
    assert by_name(compare_qmax(base, artifact(thin, q_max=2)))["ttfab_p95@N=2"] == "ok"
