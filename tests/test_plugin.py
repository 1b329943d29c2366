"""The plugin as users meet it: options, markers, errors, scenario selection, pass and fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import Faults, SerialStreamServer, Slots
from tests.factories import QUICK_RUNGS

ROOT = Path(__file__).resolve().parents[1]

NO_CACHE = ("-p", "no:cacheprovider")


def test_help_lists_every_option_with_its_default(pytester: pytest.Pytester) -> None:
    text = " ".join(pytester.runpytest("--help").stdout.str().split())
    assert "measured autoscaling for streaming TTS endpoints:" in text
    for expected in (
        "--tts-endpoint=NAME SageMaker endpoint to measure. Default: none",
        "--tts-endpoint-url=URL",
        "--endpoint=NAME Short for --tts-endpoint, where the project has no --endpoint of its own.",
        "--endpoint-url=URL Short for --tts-endpoint-url",
        "--tts-transport=KIND",
        "session). Default: response-stream.",
        "--tts-slo-ms=MS p95 objective in ms, on the clock --tts-slo-metric names; several, "
        "comma-separated (1000,2000,3000), bracket Q_max at each tier",
        "(the artifact's slo_ms is the largest). Default: 3000.",
        "--tts-slo-metric=CLOCK The clock the SLO holds: ttfab (first audio byte)",
        "--tts-ladder=N,N,... Measure exactly these concurrency rungs (the published method's "
        "ladder is 1,5,10,20,30,40,50,60). Default: none (adaptive search",
        "--tts-max-concurrency=N Highest concurrency the adaptive search may try",
        "--tts-hold-s=S Seconds each rung is held. Default: 240",
        "--tts-dry-run",
        "Default: reports.",
        "--tts-allow-config-mismatch",
        "allowed against --tts-baseline:",
    ):
        assert expected in text


def test_every_option_is_prefixed_and_under_the_plugins_heading(
    pytester: pytest.Pytester,
) -> None:
    """Options live in every pytest session of the environment: none may take a common name but
    the endpoint's short names, which give way to a project's own (test_foreign_project.py)."""
    from pytest_tts_scaling.option_table import OPTION_SPECS

    lines = pytester.runpytest("--help").stdout.lines
    heading = lines.index("measured autoscaling for streaming TTS endpoints:")
    end = next(i for i in range(heading + 1, len(lines)) if not lines[i].strip())
    # An option's line starts at the first indent; its wrapped help is indented further.
    ours = [
        line.split()[0].split("=")[0]
        for line in lines[heading + 1 : end]
        if line.startswith("  --")
    ]
    assert ours[-2:] == ["--endpoint", "--endpoint-url"]
    assert all(flag.startswith("--tts-") for flag in ours[:-2])
    assert len(ours) == len(OPTION_SPECS) + 2
    # The bare names stay free for the user's own conftest options.
    flags = {line.split()[0].split("=")[0] for line in lines if line.startswith("  --")}
    assert not flags & {"--ladder", "--dry-run", "--force", "--runs", "--model", "--baseline"}


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    for marker in ("qmax", "ttotal", "plan", "drift", "validate", "validate_live"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{marker}:*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tts-ladder", "5,1"], "*--tts-ladder*increasing order*"),
        (["--tts-slo-ms", "-3"], "*--tts-slo-ms*positive number*"),
        (["--tts-transport", "carrier-pigeon"], "*--tts-transport*invalid choice*"),
        (["--endpoint", "not_valid!"], "*--endpoint*SageMaker endpoint name*"),
        (["--endpoint-url", "localhost:8080"], "*--endpoint-url*http://*"),
        (["--tts-surge-ratio", "1.5"], "*--tts-surge-ratio*[[]1, 1.5)*"),
        (
            ["--tts-hold-s", "10", "--tts-measure-s", "20"],
            "*--tts-measure-s (tts-bench: --measure-s) 20 is longer than --tts-hold-s*",
        ),
        (["--endpoint", "a", "--endpoint-url", "http://x"], "*at most one*"),
    ],
)
def test_bad_values_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    result = pytester.runpytest(*NO_CACHE, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_scenarios_run_only_when_their_step_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.qmax
        def test_scenario(tts_options):
            pass

        def test_plain():
            pass
        """
    )
    plain = pytester.runpytest(*NO_CACHE)
    plain.assert_outcomes(passed=1, deselected=1)
    plain.stdout.fnmatch_lines(["*1 measurement scenario(s) left out*-m qmax*"])
    named = pytester.runpytest(*NO_CACHE, "-m", "qmax")
    named.assert_outcomes(passed=1, deselected=1)


def test_a_users_test_with_a_step_marker_of_its_own_runs_in_a_plain_run(
    pytester: pytest.Pytester,
) -> None:
    """Only the plugin's scenarios (a step marker on a test that uses `tts_` fixtures) are
    left out; the user's own `validate` test, which uses none, is theirs to run."""
    pytester.makeini("[pytest]\nmarkers =\n    validate: the user's own\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.validate
        def test_users_own_validate():
            pass
        """
    )
    result = pytester.runpytest(*NO_CACHE)
    result.assert_outcomes(passed=1)
    assert "left out" not in result.stdout.str()


def test_dry_run_prints_the_schedule_and_sends_nothing(
    pytester: pytest.Pytester, qmax_scenario: Path
) -> None:
    # Nothing listens on port 9: a request would fail, the dry run must not send one.
    result = pytester.runpytest(
        *NO_CACHE,
        "-m",
        "qmax",
        "--tts-dry-run",
        "--endpoint-url",
        "http://127.0.0.1:9",
        "--tts-ladder",
        "1,5,10",
        "--tts-hold-s",
        "60",
        "--tts-measure-s",
        "30",
        "--tts-gap-s",
        "10",
    )
    result.stdout.fnmatch_lines(
        [
            "*qmax dry run: url endpoint http://127.0.0.1:9*",
            "*ladder 1,5,10: hold 60 s (last 30 s measured), gap 10 s*",
            "*rung 3: N=10 * starts at +    140 s*",
            "*estimate: 3.3 min*",
        ]
    )
    assert result.ret == 0
    assert not (pytester.path / "reports").exists()


def test_dry_run_of_the_search_states_its_worst_case_past_capture(
    pytester: pytest.Pytester, qmax_scenario: Path
) -> None:
    """In a pytest subprocess, where capture is real: the schedule reaches the terminal."""
    result = pytester.runpytest_subprocess(
        *NO_CACHE,
        "-m",
        "qmax",
        "--tts-dry-run",
        "--endpoint-url",
        "http://127.0.0.1:9",
        "--tts-max-concurrency",
        "64",
        "--tts-hold-s",
        "60",
        "--tts-measure-s",
        "30",
        "--tts-gap-s",
        "10",
    )
    result.stdout.fnmatch_lines(
        [
            "qmax dry run: url endpoint http://127.0.0.1:9*",
            "adaptive search up to N=64: hold 60 s (last 30 s measured), gap 10 s, runs 1",
            "  rung 1: N=1; then the predicted SLO crossing*N pass / N+1 fail, then N once more "
            "to confirm*",
            # 2*log2(64)+6 = 18 concurrencies, 3 measurements each of up to 60+4*30 s (a sparse
            # window is held up to 4 more), 53 gaps of 10 s
            "estimate: about 5.7 min (4-6 rungs); worst case 170.8 min: 18 concurrencies, each "
            "measured up to 3 times*",
        ]
    )
    assert result.ret == 0


def test_qmax_against_a_server_with_known_capacity(
    pytester: pytest.Pytester, qmax_scenario: Path, serial_server: SerialStreamServer
) -> None:
    """The acceptance check of the measurement chain: a serial server whose Q_max is 10.

    In a pytest subprocess, so capture is real: per-rung progress must reach the terminal
    while the ladder runs (it runs inside fixture setup, where output is captured).
    """
    assert serial_server.true_qmax(1000) == 10
    artifacts = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        *NO_CACHE,
        "-m",
        "qmax",
        "--endpoint-url",
        serial_server.base_url,
        "--tts-ladder",
        "1,2,4,8,12,16",
        "--tts-hold-s",
        "6",
        "--tts-measure-s",
        "4",
        "--tts-gap-s",
        "0",
        "--tts-slo-ms",
        "1000",
        f"--tts-artifacts-dir={artifacts}",
        "--tts-min-qmax",
        "10",
        "--html",
        str(pytester.path / "report.html"),
        "--self-contained-html",
    )
    result.assert_outcomes(passed=3, skipped=1)  # skipped: the --baseline gate
    result.stdout.fnmatch_lines(
        [
            "*qmax N=1 ladder: measuring 0/4 s, p95 TTFAB so far * ms in the * (SLO 1000 ms), "
            "* done; run ETA *m*s",
            "*qmax N=12 * FAIL (slo)*",
            "*qmax N=10 * refine*pass*",
            "*Q_max 10 (bracketed: N=11 failed, p95 TTFAB 1*ms > SLO 1000 ms)*",
        ]
    )
    [path] = artifacts.glob("qmax-kokoro-82m-response-stream-url-*.json")
    artifact = json.loads(path.read_text())
    assert artifact["q_max"] == 10
    assert artifact["q_max_bracketed"] is True
    assert artifact["complete"] is True
    by_n = {r["concurrency"]: r for r in artifact["rungs"]}
    assert sorted(by_n) == [1, 2, 4, 8, 10, 11, 12, 16]
    # Closed loop on a serial server: TTFAB = (N-1)*100 ms + 50 ms, throughput 10/s.
    for n, rung in by_n.items():
        assert rung["ttfab_ms"]["p50"] == pytest.approx((n - 1) * 100 + 50, abs=30)
        assert rung["throughput_rps"] == pytest.approx(10, rel=0.15)
        assert rung["concurrency_mean"] == pytest.approx(n, rel=0.05)
    records = (artifacts / artifact["records_file"]).read_text().splitlines()
    assert len(records) >= sum(r["completed"] for r in artifact["rungs"])
    assert {"request_id", "start_ns", "end_ns", "ttfab_ms"} <= set(json.loads(records[0]))
    html = (pytester.path / "report.html").read_text()
    assert "data:image/svg+xml;base64" in html
    assert "p95 CI" in html


def test_min_qmax_gate_fails_naming_both_numbers(
    pytester: pytest.Pytester, qmax_scenario: Path
) -> None:
    with SerialStreamServer(service_s=0.05, first_audio_s=0.02) as server:
        result = pytester.runpytest(
            *NO_CACHE,
            "-m",
            "qmax",
            "--endpoint-url",
            server.base_url,
            "--tts-ladder",
            "1,2",
            "--tts-hold-s",
            "2",
            "--tts-measure-s",
            "1.5",
            "--tts-gap-s",
            "0",
            "--tts-slo-ms",
            "1000",
            f"--tts-artifacts-dir={pytester.path / 'out'}",
            "--tts-min-qmax",
            "5",
            "-rs",
        )
    # skipped: the --baseline gate, and the bracket (the given ladder's top rung passed)
    result.assert_outcomes(passed=1, failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*Q_max 2 is below --tts-min-qmax (tts-bench: --min-qmax) 5*"])
    result.stdout.fnmatch_lines(["*SKIPPED*lower bound of the given ladder*extend --tts-ladder*"])


def test_the_search_must_bracket_qmax(pytester: pytest.Pytester, qmax_scenario: Path) -> None:
    """The search reaching --max-concurrency with every rung passing has not found Q_max."""
    with SerialStreamServer(service_s=0.05, first_audio_s=0.01, slots=64) as server:
        result = pytester.runpytest(
            *NO_CACHE,
            "-m",
            "qmax",
            "--endpoint-url",
            server.base_url,
            "--tts-max-concurrency",
            "6",
            *QUICK_RUNGS,
            f"--tts-artifacts-dir={pytester.path / 'out'}",
            "-rs",
        )
    result.assert_outcomes(passed=1, failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["*Q_max 6 is only a lower bound*(the search went up to N=6); raise --tts-max-concurrency*"]
    )


def test_search_measures_a_four_slot_server_exactly(
    pytester: pytest.Pytester, qmax_scenario: Path
) -> None:
    """4 slots, 100 ms each, first audio at 50 ms, SLO 400 ms: Q_max = 4·floor(4.5) = 16.

    The old verdicts measured 9 (source ladder) and 5 (every integer) on such a server, reading
    its steady waves of TTFAB as "not settled". The search needs N=1, 4, 16 and 17.
    """
    artifacts = pytester.path / "out"
    with SerialStreamServer(slots=4, service_s=0.1, first_audio_s=0.05) as server:
        result = pytester.runpytest(
            *NO_CACHE,
            "-m",
            "qmax",
            "--endpoint-url",
            server.base_url,
            "--tts-slo-ms",
            "400",
            "--tts-hold-s",
            "4",
            "--tts-measure-s",
            "2.5",
            "--tts-gap-s",
            "0",
            f"--tts-artifacts-dir={artifacts}",
        )
    result.assert_outcomes(passed=2, skipped=2)  # skipped: the --min-qmax and --baseline gates
    [path] = artifacts.glob("qmax-*.json")
    artifact = json.loads(path.read_text())
    assert (artifact["q_max"], artifact["q_max_bracketed"]) == (16, True)
    by_n = {r["concurrency"]: r for r in artifact["rungs"]}
    assert {16, 17} <= set(by_n)
    assert len(by_n) <= 5
    assert all(r["usable"] for r in by_n.values())
    assert by_n[16]["meets_slo"]
    assert by_n[17]["fail_reason"] == "slo"
    assert by_n[17]["ttfab_p95_ci_ms"]["low"] > 400
    # Enough requests were seen to judge: at 40 rps, about 100 in each 2.5 s window.
    assert by_n[17]["completed"] >= 40
    assert artifact["settings"]["ladder"] is None
    result.stdout.fnmatch_lines(["*Q_max 16 (bracketed: N=17 failed*"])


def test_errors_fail_the_rung_by_kind_and_no_rung_met_is_not_bracketed(
    pytester: pytest.Pytester, qmax_scenario: Path
) -> None:
    """1 request in 10 gets headers, then the connection drops: the old verdict passed this.

    Goodput counts those requests above the SLO and fails the rung with reason `errors`; the
    words say no rung met the SLO, never "bracketed", and blame the errors, not the latency.
    """
    artifacts = pytester.path / "out"
    serial = Slots(slots=1, service_s=0.05, first_audio_s=0.02)
    with SerialStreamServer(discipline=serial, faults=Faults(error_every=10)) as server:
        result = pytester.runpytest(
            *NO_CACHE,
            "-m",
            "qmax",
            "--endpoint-url",
            server.base_url,
            "--tts-slo-ms",
            "295",
            "--tts-hold-s",
            "3",
            "--tts-measure-s",
            "2",
            "--tts-gap-s",
            "0",
            f"--tts-artifacts-dir={artifacts}",
            "-rs",
        )
    result.assert_outcomes(failed=1, skipped=3)  # skipped: bracket, --min-qmax, --baseline
    result.stdout.fnmatch_lines(
        [
            "*qmax N=1 * FAIL (errors); * done, * without audio*",
            "*no rung met the SLO: requests ended without audio (no_audio)*it is not slow*",
            "*SKIPPED*no Q_max to bracket*",
        ]
    )
    assert not [line for line in result.outlines if "qmax" in line and "(bracketed" in line]
    [path] = artifacts.glob("qmax-*.json")
    artifact = json.loads(path.read_text())
    assert (artifact["q_max"], artifact["q_max_bracketed"]) == (None, False)
    [rung] = artifact["rungs"]
    assert rung["usable"]
    assert rung["fail_reason"] == "errors"
    assert rung["errors_by_kind"]["no_audio"] >= 2
    assert rung["goodput_ttfab_p95_ms"] > 295


def test_tts_bench_qmax_dry_run_takes_the_search_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_tts_scaling.cli import main

    url = ("--endpoint-url", "http://127.0.0.1:9")
    assert main(["qmax", "--dry-run", *url, "--max-concurrency", "32", "--hold-s", "10"]) == 0
    out = capsys.readouterr().out
    assert "adaptive search up to N=32: hold 10 s" in out
    assert "worst case" in out
    assert main(["qmax", "--dry-run", *url, "--ladder", "1,2"]) == 0
    assert "ladder 1,2:" in capsys.readouterr().out


def test_ttotal_without_the_qmax_artifact_fails_before_any_endpoint_opens(
    pytester: pytest.Pytester,
) -> None:
    """No --qmax-artifact: one line naming the flag, and the endpoint (a local container here)
    is never set up."""
    pytester.makepyfile(test_ttotal=(ROOT / "scenarios" / "test_ttotal.py").read_text())
    result = pytester.runpytest(
        *NO_CACHE, "-m", "ttotal", "--tts-artifacts-dir", "out", "--setup-show"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*ttotal needs the qmax artifact: expected --tts-qmax-artifact (tts-bench: *"]
    )
    result.stdout.fnmatch_lines(["*SETUP*tts_ttotal_inputs*"])
    result.stdout.no_fnmatch_line("*SETUP*tts_endpoint*")
