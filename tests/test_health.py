"""A dead, broken, stalling or gated endpoint is named as such, in seconds, and never blamed on
the SLO: the health probe before rung 1, the check after a rung that heard nothing, and the
admission bound read from the endpoint's own 503 body."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from pytest_tts_scaling import cli
from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.calibration.disciplines import Faults
from pytest_tts_scaling.core.records import RequestSpec
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.errors import EndpointUnavailable, InputError
from pytest_tts_scaling.load.engine import stall_bound_s
from pytest_tts_scaling.load.transports import Transport
from pytest_tts_scaling.load.workload import Workload
from pytest_tts_scaling.steps.qmax import run_ladder
from pytest_tts_scaling.steps.qmax.health import require_answer
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs
from tests.factories import qmax_inputs
from tests.fault_server import FaultServer

WORKLOAD = Workload()


def request(worker: int, seq: int) -> RequestSpec:
    return WORKLOAD.request(1, worker, seq)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def quick_stalls(monkeypatch: pytest.MonkeyPatch) -> float:
    """A 1 s stall bound (and probe patience) instead of 5 s and 20 s, so the tests stay short."""
    monkeypatch.setattr("pytest_tts_scaling.load.engine.STALL_FLOOR_S", 1.0)
    monkeypatch.setattr("pytest_tts_scaling.steps.qmax.PROBE_PATIENCE_S", 1.0)
    return stall_bound_s(200)


def settings(url: str, tmp_path: Path, ladder: str, **extra: object) -> QmaxInputs:
    return qmax_inputs(
        endpoint_url=url,
        ladder=tuple(int(n) for n in ladder.split(",")),
        slo_ms=200,
        hold_s=1.5,
        measure_s=1.0,
        gap_s=0,
        artifacts_dir=tmp_path,
        **extra,
    )


def artifact(tmp_path: Path) -> dict[str, Any]:
    [path] = tmp_path.glob("qmax-*.json")
    return dict(json.loads(path.read_text()))


def test_stall_bound_is_tied_to_the_slo() -> None:
    assert stall_bound_s(200) == 5.0
    assert stall_bound_s(3000) == 6.0


@pytest.mark.timeout(60)
def test_connection_refused_ends_the_probe_at_the_third_refusal() -> None:
    """Refusals settle the probe: with a 600 s stall bound the probe would otherwise wait
    3 × 600 s, so finishing inside the test's timeout is the proof, whatever the machine's load."""
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(EndpointUnavailable) as caught:
        require_answer(UrlEndpoint(url), "response-stream", request, stall_s=600.0)
    assert str(caught.value) == (
        f"endpoint {url} does not answer: connection refused (3 of 3 requests); "
        "nothing was measured"
    )


def test_tts_bench_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    args = ["qmax", "--endpoint-url", url, "--ladder", "1,2", "--artifacts-dir", str(tmp_path)]
    assert cli.main([*args, "--hold-s", "2", "--measure-s", "1", "--gap-s", "0"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors == [
        f"tts-bench qmax: error: endpoint {url} does not answer: connection refused "
        "(3 of 3 requests); nothing was measured"
    ]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (500, "every answer is HTTP 500 internal_error: the endpoint is broken, not slow"),
        (400, "every answer is HTTP 400 internal_error: it refuses the workload's request"),
    ],
)
def test_an_error_on_every_answer_is_a_broken_endpoint(status: int, said: str) -> None:
    with FaultServer(status=status) as server:
        with pytest.raises(EndpointUnavailable, match=f"does not answer: {said} \\(3 of 3"):
            require_answer(UrlEndpoint(server.base_url), "response-stream", request, stall_s=5)
        assert server.requests_seen == 3


@pytest.mark.timeout(60)
def test_silence_after_the_headers_is_a_stall_within_the_bound() -> None:
    """The stalled request is cut at the stall bound and not drained: the server never answers,
    so a drain would outlast the test's timeout."""
    with SerialStreamServer(faults=Faults(stall_after_headers=True)) as server:
        with pytest.raises(EndpointUnavailable, match=r"sent nothing for 1 s \(stalled\)"):
            require_answer(UrlEndpoint(server.base_url), "response-stream", request, stall_s=1)
        assert server.requests_seen == 1  # a stall is not retried


def test_a_healthy_endpoint_passes_the_probe_with_one_request() -> None:
    with SerialStreamServer(service_s=0.05, first_audio_s=0.02) as server:
        probe = require_answer(UrlEndpoint(server.base_url), "response-stream", request, stall_s=5)
    assert probe.healthy
    assert probe.summary()["requests"] == 1
    assert probe.answer is not None
    # Its first audio came after 20 ms: the quietest stretch is that wait, within the answer.
    assert 0.015 <= probe.quietest_s <= probe.answer.latency_ms / 1000
    assert probe.answer.rung == 0


def test_a_cold_first_answer_is_asked_for_again_and_does_not_raise_the_stall_bound() -> None:
    # A first request that loads the model is silent 2 s: three times that would make a stall
    # cost 6 s instead of 5. The warm answer's 20 ms is the endpoint's own silence.
    with FaultServer(service_s=0.05, first_audio_s=0.02, cold_s=2.0) as server:
        probe = require_answer(
            UrlEndpoint(server.base_url), "response-stream", request, stall_s=5, cold_s=5 / 3
        )
    assert probe.healthy
    assert probe.summary()["requests"] == 2
    assert probe.summary()["cold_ttfab_ms"] == probe.records[0].ttfab_ms
    assert [r.status for r in probe.records] == ["ok", "ok"]
    assert (probe.records[0].ttfab_ms or 0.0) >= 2000.0
    # The warm answer's silence, not the cold one's 2 s, is the endpoint's own.
    assert probe.quietest_s < (probe.records[0].ttfab_ms or 0.0) / 1000
    assert stall_bound_s(200, probe.quietest_s) == 5.0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", ["stalls", "dies"])
def test_an_endpoint_that_stops_mid_run_ends_the_ladder_with_the_rungs_kept(
    fault: str, tmp_path: Path, quick_stalls: float
) -> None:
    with FaultServer(service_s=0.05, first_audio_s=0.02, slots=4) as server:

        class FailsAtTwo(UrlEndpoint):
            """The server fails as the ladder reaches N=2 (rung 1 was measured)."""

            def transport(self, name: str, *, concurrency: int) -> Transport:
                if concurrency >= 2:
                    if fault == "stalls":
                        server.faults = Faults(stop_after=server.requests_seen)
                    else:
                        server.stop_listening()
                return super().transport(name, concurrency=concurrency)

        endpoint = FailsAtTwo(server.base_url)
        # A stalled server never answers: the ladder ends because it cuts at the stall bound,
        # within the test's timeout, not because the server let go.
        with pytest.raises(EndpointUnavailable) as caught:
            run_ladder(endpoint, settings(server.base_url, tmp_path, "1,2,4"), progress=print)
    seen = "it sent nothing for 1 s (stalled)" if fault == "stalls" else "connection refused"
    assert f"{server.base_url}: endpoint stopped answering at N=2: {seen}" in str(caught.value)
    assert "marked incomplete" in str(caught.value)
    written = artifact(tmp_path)
    assert written["complete"] is False
    assert str(written["stop_reason"]).startswith(f"endpoint stopped answering at N=2: {seen}")
    assert [r["concurrency"] for r in written["rungs"]] == [1]
    probe = written["probe"]
    assert (probe["requests"], probe["healthy"]) == (1, True)
    # First audio after 20 ms, the answer after 50 ms: never sooner (a busy host only delays).
    assert 15 <= probe["ttfab_ms"] <= probe["latency_ms"]
    assert probe["latency_ms"] >= 45
    assert set(probe) == {"requests", "healthy", "ttfab_ms", "latency_ms"}


def test_the_503_body_names_the_bound_and_a_ladder_above_it_is_refused(tmp_path: Path) -> None:
    gated = Faults(max_queue_depth=2)
    with SerialStreamServer(service_s=0.2, first_audio_s=0.1, slots=2, faults=gated) as server:
        endpoint = UrlEndpoint(server.base_url)
        with pytest.raises(InputError) as caught:
            run_ladder(endpoint, settings(server.base_url, tmp_path, "1,3,5"), progress=print)
    expected = (
        f"the admission bound of {server.base_url} is 2 (max_queue_depth in the endpoint's 503 "
        "answer at N=3), below the top rung 5"
    )
    assert str(caught.value).startswith(expected)
    assert "--allow-shallow-queue" in str(caught.value)
    written = artifact(tmp_path)
    assert written["complete"] is False
    assert written["stop_reason"] == f"refused: {caught.value}"
    assert written["admission_bound"] == 2
    assert written["unbounded_queue"] is False
    assert [r["concurrency"] for r in written["rungs"]] == [1, 3]


def test_allow_shallow_queue_measures_on_and_names_the_bound(tmp_path: Path) -> None:
    gated = Faults(max_queue_depth=2)
    with SerialStreamServer(service_s=0.2, first_audio_s=0.1, slots=2, faults=gated) as server:
        endpoint = UrlEndpoint(server.base_url)
        result = run_ladder(
            endpoint,
            settings(server.base_url, tmp_path, "1,3", allow_shallow_queue=True),
            progress=print,
        )
    written = result.artifact
    assert written.complete is True
    assert written.admission_bound == 2
    assert written.admission_bound_source == ("max_queue_depth in the endpoint's 503 answer at N=3")
    assert any("admission bound 2" in line for line in result.summary_lines())


def test_under_pytest_a_dead_endpoint_is_an_error_not_a_failure(
    pytester: pytest.Pytester, qmax_scenario: Path
) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-m",
        "qmax",
        "--endpoint-url",
        url,
        "--tts-ladder",
        "1,2",
        "--tts-hold-s",
        "2",
        "--tts-measure-s",
        "1",
        f"--tts-artifacts-dir={pytester.path / 'out'}",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) >= 1
    assert outcomes.get("failed", 0) == 0
    assert outcomes.get("passed", 0) == 0
    result.stdout.fnmatch_lines([f"qmax: error: endpoint {url} does not answer*"])


def test_the_command_line_says_why_no_rung_passed_as_pytest_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every rung slower than the SLO: `tts-bench qmax` exits 1 naming the lowest rung's p95,
    the same words as `pytest -m qmax` (steps.qmax_words.no_qmax_message)."""
    with SerialStreamServer(service_s=0.05, first_audio_s=0.03) as server:
        args = ["qmax", "--endpoint-url", server.base_url, "--ladder", "1,2", "--slo-ms", "10"]
        timing = ["--hold-s", "1.5", "--measure-s", "1", "--gap-s", "0"]
        assert cli.main([*args, *timing, "--artifacts-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "qmax: FAIL: no rung met p95 TTFAB <= 10 ms; lowest rung N=1 p95 " in out
    # N=1 alone missed the SLO: the last line is the next step, as a command.
    assert out.strip().splitlines()[-1].startswith("qmax: next: tts-bench qmax --slo-ms 500 (N=1")


def test_the_stall_bound_grows_with_the_longest_silence_of_a_lone_request() -> None:
    # A CPU server computing a 3.6 s segment before sending it is slow, not stopped: at three
    # times that silence its streams are cut, not at twice the SLO.
    assert stall_bound_s(3000) == 6.0
    assert stall_bound_s(3000, quietest_s=3.6) == pytest.approx(10.8)
    assert stall_bound_s(200, quietest_s=0.05) == 5.0
