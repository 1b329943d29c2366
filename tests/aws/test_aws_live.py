"""validate_live against a deployed endpoint: the fleet's doings read from AWS and mapped into
the local fleet's events and dispatches, so fleet/live.py's checks run unchanged.

CloudWatch and DescribeEndpoint on moto; DescribeScalingActivities through a botocore Stubber
(moto has no scaling activities); the mapping on a fake clock; the scenario's choice of path in
a pytest subprocess; one load through `tts-bench load --trace --endpoint` against the local
event-stream server with the fleet watched on moto.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import itertools
import json
import math
import shutil
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from botocore.stub import Stubber

from pytest_tts_scaling.artifacts import load, save
from pytest_tts_scaling.aws.checks import live as aws_live
from pytest_tts_scaling.aws.checks.live import Activity, CountSample, Datapoint, DeployedFleet
from pytest_tts_scaling.aws.clients import AwsClients, Clock
from pytest_tts_scaling.aws.scaling import ScalingScope
from pytest_tts_scaling.core import live
from pytest_tts_scaling.core.autoscaler import Policy
from pytest_tts_scaling.core.schema import PlanArtifact
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps import validate_live
from pytest_tts_scaling.steps.deployed import DeployedInputs
from tests.aws.aws_helpers import FakeClock, deploy, make_plan, put_concurrency, unique
from tests.aws.eventstream_server import Script, event_stream_server, payload_part

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "reports" / "examples" / "source"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SCOPE = ScalingScope("speech-live", "AllTraffic")
RESOURCE = "endpoint/speech-live/variant/AllTraffic"
PCM = b"\x01\x00" * 2400
POLICY = Policy(
    target_concurrency=12.0,
    scale_in_concurrency=8.0,
    min_instances=1,
    max_instances=4,
    scale_out_cooldown_s=30.0,
    scale_in_cooldown_s=960.0,
    provision_s=200.0,
    queue_max_depth=16,
)


def story(**args: Any) -> live.LiveTraffic:
    """The validate_live traffic of a plan on two instances with a 1.25 surge."""
    given: dict[str, Any] = {"policy": POLICY, "surge_ratio": 1.25, "initial_instances": 2}
    return live.live_traffic(**{**given, **args})


def small_story() -> live.LiveTraffic:
    """A story of about 10 s: 50x compressed, a few requests a second."""
    return story(
        per_instance_rps=2.0,
        base_rps=3.0,
        t_total_s=50.0,
        trough_rps=1.0,
        time_scale=50.0,
        policy=replace(POLICY, scale_in_cooldown_s=60.0),
    )


def ns(seconds: float) -> int:
    return round((T0 + timedelta(seconds=seconds)).timestamp() * 1e9)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def activity(
    start_s: float, to: int, status: str = "Successful", end_s: float | None = None
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "ActivityId": unique("act"),
        "ServiceNamespace": "sagemaker",
        "ResourceId": RESOURCE,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "Description": f"Setting desired instance count to {to}.",
        "Cause": "monitor alarm TargetTracking-... in state ALARM triggered policy ...",
        "StartTime": at(start_s),
        "StatusCode": status,
    }
    if end_s is not None:
        item["EndTime"] = at(end_s)
    return item


def offline(service: str) -> Any:
    """A client that can reach nothing: a Stubber answers for it."""
    return boto3.client(
        service,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        endpoint_url="http://127.0.0.1:9",
    )


def stubbed_autoscaling(
    pages: list[list[dict[str, Any]]], *, more: bool = False, resource: str = RESOURCE
) -> tuple[Any, Stubber]:
    """A client answering `pages` in turn; `more`: the last one says another page follows."""
    client = offline("application-autoscaling")
    stubber = Stubber(client)
    expected = {
        "ServiceNamespace": "sagemaker",
        "ResourceId": resource,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
    }
    for i, page in enumerate(pages):
        answer: dict[str, Any] = {"ScalingActivities": page}
        if i + 1 < len(pages) or more:
            answer["NextToken"] = f"page-{i + 1}"
        params = {**expected, **({"NextToken": f"page-{i}"} if i else {})}
        stubber.add_response("describe_scaling_activities", answer, params)
    stubber.activate()
    return client, stubber


# --- DescribeScalingActivities (Stubber) ---------------------------------------------------


def test_activities_are_paged_filtered_to_the_run_and_oldest_first() -> None:
    client, stubber = stubbed_autoscaling(
        [
            [activity(900, 2, end_s=905), activity(500, 3, "InProgress")],
            [
                activity(400, 4, "Failed"),  # changed nothing
                activity(120, 3, end_s=400),
                activity(-60, 2, end_s=-30),  # before the run
            ],
        ]
    )
    found = aws_live.scaling_activities(client, SCOPE, at(0), at(600))
    stubber.assert_no_pending_responses()
    assert found == [
        Activity(ns(120), ns(400), 3, "Successful"),
        Activity(ns(500), None, 3, "InProgress"),
    ]


def test_every_page_is_read_whatever_order_the_activities_come_in() -> None:
    # Oldest first, and an activity from before the run on the first page: the run's own
    # activities on the pages after it still count (the API documents no order).
    client, stubber = stubbed_autoscaling(
        [
            [activity(-5, 2), activity(30, 3, end_s=200)],
            [activity(-300, 1, end_s=-250)],
            [activity(45, 4, end_s=300)],
        ]
    )
    assert [a.desired for a in aws_live.scaling_activities(client, SCOPE, at(0), at(60))] == [
        3,
        4,
    ]
    stubber.assert_no_pending_responses()


def test_an_activity_whose_description_names_no_count_takes_it_from_the_polls() -> None:
    odd = activity(120, 9, end_s=340) | {"Description": "Scaling out the variant."}
    client, _ = stubbed_autoscaling([[odd]])
    lines: list[str] = []
    found = aws_live.scaling_activities(client, SCOPE, at(0), at(600), log=lines.append)
    assert found == [Activity(ns(120), ns(340), None, "Successful")]
    assert lines == [
        "1 scaling activity name no count ('Scaling out the variant.'): the count is read "
        "from DescribeEndpoint's DesiredInstanceCount polled after it began"
    ]
    samples = [CountSample(ns(0), 2, 2), CountSample(ns(100), 2, 2), CountSample(ns(150), 2, 3)]
    events = aws_live.fleet_events(found, samples)
    assert [(e.kind, e.at_ns, e.serving) for e in events] == [
        ("out", ns(120), 2),
        ("first_served", ns(340), 3),
    ]


# --- the mapping into the local fleet's shapes (fake clock) ---------------------------------


def test_activities_and_polls_become_the_fleet_events_the_checks_read() -> None:
    samples = [
        CountSample(ns(0), 2, 2),
        CountSample(ns(150), 2, 4),
        CountSample(ns(290), 3, 4),  # the first new instance is in service
        CountSample(ns(330), 4, 4),
    ]
    activities = [
        Activity(ns(120), ns(340), 4, "Successful"),
        Activity(ns(1500), ns(1560), 3, "Successful"),
        Activity(ns(1700), None, 3, "InProgress"),  # no change: no event
        Activity(ns(2500), ns(2520), 2, "Successful"),
    ]
    events = aws_live.fleet_events(activities, samples)
    assert [(e.kind, e.at_ns, e.serving) for e in events] == [
        ("out", ns(120), 2),
        ("first_served", ns(290), 3),
        ("in", ns(1500), 3),
        ("in", ns(2500), 2),
    ]
    traffic = story(per_instance_rps=30.0, base_rps=54.0, t_total_s=300.0, trough_rps=9.0)
    # The surge began 100 s into the run: the first new instance served 190 s later.
    t0 = ns(100) - int(traffic.surge[0] * 1e9)
    first = live.check_first_new_instance(events, t0, traffic)
    assert first.ok, first.detail
    assert "190.0 s after the surge began" in first.detail
    scale_in = live.check_scale_in(events, traffic)
    assert scale_in.ok, scale_in.detail
    assert "2 scale-in(s), gaps between them: 1000.0 s" in scale_in.detail


def test_a_scale_out_no_poll_saw_serves_at_the_activitys_end() -> None:
    events = aws_live.fleet_events(
        [Activity(ns(10), ns(250), 3, "Successful"), Activity(ns(400), None, 4, "InProgress")],
        [CountSample(ns(0), 2, 2)],
    )
    assert [(e.kind, e.at_ns) for e in events] == [
        ("out", ns(10)),
        ("first_served", ns(250)),
        ("out", ns(400)),  # not served yet: no first_served
    ]


def test_in_flight_per_instance_is_the_periods_maximum_per_model_container() -> None:
    """ConcurrentRequestsPerModel counts per container: its Maximum is judged against Q_max as
    it is, whatever the instance count."""
    points = [Datapoint(ns(0), 16.0), Datapoint(ns(10), 20.0), Datapoint(ns(30), 17.0)]
    rows = [
        {"epoch_start_ns": ns(3), "status": "rejected"},
        {"epoch_start_ns": ns(12), "status": "ok"},
        {"epoch_start_ns": ns(22), "status": "rejected"},  # no datapoint for 20-30 s
        {"epoch_start_ns": ns(31), "status": "rejected"},
    ]
    got = aws_live.dispatches(rows, points, "speech-live/AllTraffic")
    assert [d.in_flight_before for d in got[:2]] == [16.0, 20.0]
    assert math.isnan(got[2].in_flight_before)
    assert got[3].in_flight_before == pytest.approx(17.0)
    check = live.check_rejections(got, 16)
    assert not check.ok
    assert "3 of 4 requests rejected; 0 of them" in check.detail
    assert "1 with no in-flight reading" in check.detail
    assert live.check_rejections([got[0], got[3]], 16).ok
    below = live.check_rejections([got[0], got[3]], 17)
    assert not below.ok
    assert "(as few as 16)" in below.detail


# --- CloudWatch and DescribeEndpoint (moto) -------------------------------------------------


def test_concurrency_maxima_read_back_what_cloudwatch_holds(clients: AwsClients) -> None:
    endpoint = unique()
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=20)
    values = [(start + timedelta(seconds=10 * i), float(i % 7)) for i in range(60)]
    put_concurrency(endpoint, "AllTraffic", values)
    scope = ScalingScope(endpoint, "AllTraffic")
    end = start + timedelta(seconds=600)
    points = aws_live.concurrency_maxima(clients.cloudwatch, scope, start, end, clock=clients.clock)
    assert [(p.start_ns, p.maximum) for p in points] == [
        (round(t.timestamp() * 1e9), v) for t, v in values
    ]


def _six_periods(start_s: float, end_s: float) -> tuple[datetime, datetime, datetime]:
    """The start of six 10 s periods 20 minutes ago, and a run from `start_s` to `end_s` in."""
    period = datetime.fromtimestamp((time.time() - 1200) // 10 * 10, UTC)
    return period, period + timedelta(seconds=start_s), period + timedelta(seconds=end_s)


def _read(
    clients: AwsClients, period: datetime, start: datetime, end: datetime
) -> list[aws_live.Datapoint]:
    """Maxima 1 to 6 put in the six periods from ``period``, read back for the run."""
    endpoint = unique()
    values = [(period + timedelta(seconds=10 * i), float(i + 1)) for i in range(6)]
    put_concurrency(endpoint, "AllTraffic", values)
    return aws_live.concurrency_maxima(
        clients.cloudwatch, ScalingScope(endpoint, "AllTraffic"), start, end, clock=clients.clock
    )


def test_a_run_that_starts_mid_period_reads_the_period_it_starts_in(clients: AwsClients) -> None:
    """CloudWatch's periods sit on the clock's 10 s; a run starting 3 s into one still gets a
    reading for its first seconds."""
    period, start, end = _six_periods(3, 55)
    points = _read(clients, period, start, end)
    assert points[0].start_ns == round(period.timestamp() * 1e9)
    first_request = {"epoch_start_ns": round(start.timestamp() * 1e9) + 10**8, "status": "ok"}
    (dispatch,) = aws_live.dispatches([first_request], points, "speech-live/AllTraffic")
    assert dispatch.in_flight_before == 1.0


def test_a_run_that_ends_just_into_a_period_reads_the_period_it_ends_in(
    clients: AwsClients,
) -> None:
    """The query's end is exclusive and cut to the second: a run ending 0.5 s into a period,
    its last request sent 0.2 s into it, still gets that period's reading."""
    period, start, end = _six_periods(3, 50.5)
    points = _read(clients, period, start, end)
    last_request = {"epoch_start_ns": round(end.timestamp() * 1e9) - 3 * 10**8, "status": "ok"}
    (dispatch,) = aws_live.dispatches([last_request], points, "speech-live/AllTraffic")
    assert dispatch.in_flight_before == 6.0


def test_a_run_read_after_three_hours_is_read_at_the_period_cloudwatch_still_holds() -> None:
    """10 s datapoints are kept for 3 hours: a run read 4 hours later asks for 60 s periods,
    as the rungs' join does, and each reading covers its whole minute."""
    client = offline("cloudwatch")
    start, end = at(15), at(15 + 300)
    points = [{"Timestamp": at(60 * i), "Maximum": float(i + 1)} for i in range(6)]
    stubber = Stubber(client)
    stubber.add_response(
        "get_metric_statistics",
        {"Datapoints": points},
        {
            "Namespace": "AWS/SageMaker",
            "MetricName": "ConcurrentRequestsPerModel",
            "Dimensions": SCOPE.metric_dimensions,
            "StartTime": at(0),
            "EndTime": at(360),
            "Period": 60,
            "Statistics": ["Maximum"],
        },
    )
    lines: list[str] = []
    with stubber:
        read = aws_live.concurrency_maxima(
            client,
            SCOPE,
            start,
            end,
            clock=FakeClock(start=at(4 * 3600)).clock(),
            log=lines.append,
        )
    assert [p.period_s for p in read] == [60] * 6
    assert lines == [
        "CloudWatch keeps 10 s datapoints for 3 h only: ConcurrentRequestsPerModel is read at 60 s"
    ]
    (late,) = aws_live.dispatches(
        [{"epoch_start_ns": ns(100), "status": "ok"}], read, "speech-live/AllTraffic"
    )
    assert late.in_flight_before == 2.0  # 40 s into the minute that starts at 60 s


def test_concurrency_maxima_wait_bounded_for_the_metric_to_cover_the_run(
    clients: AwsClients, fake_clock: FakeClock
) -> None:
    endpoint = unique()
    start = fake_clock.now() - timedelta(minutes=5)
    put_concurrency(endpoint, "AllTraffic", [(start + timedelta(seconds=10), 4.0)])
    lines: list[str] = []
    points = aws_live.concurrency_maxima(
        clients.cloudwatch,
        ScalingScope(endpoint, "AllTraffic"),
        start,
        fake_clock.now(),
        clock=clients.clock,
        max_lag_s=60,
        poll_s=20,
        log=lines.append,
    )
    assert [p.maximum for p in points] == [4.0]
    assert sum(fake_clock.sleeps) == pytest.approx(60)
    assert lines == [
        "waiting up to 60 s for CloudWatch ConcurrentRequestsPerModel to cover the run"
    ]


def test_the_fleet_polls_describe_endpoint_for_the_variants_counts(aws_env: dict[str, str]) -> None:
    deployed = deploy(unique(), instances=3, metric_data=False)
    clients = AwsClients(clock=Clock())
    with DeployedFleet(clients, deployed.endpoint, deployed.variant, poll_s=0.05) as fleet:
        clients.clock.wait_for(
            lambda: True if len(fleet.samples) >= 4 else None,
            timeout_s=30,
            interval_s=0.05,
            what="four DescribeEndpoint polls",
        )
    assert {(s.current, s.desired) for s in fleet.samples} == {(3, 3)}
    assert fleet.started is not None
    assert fleet.ended is not None
    assert all(a.at_ns <= b.at_ns for a, b in itertools.pairwise(fleet.samples))


# --- one load against the endpoint, the fleet watched ---------------------------------------


def test_the_deployed_replay_end_to_end_on_the_stand_in_and_moto(
    aws_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """plan from the artifacts dir -> trace load on the endpoint -> the fleet read back -> the
    records the checks take, with the readings written beside them. The plan's own pace would
    take the better part of an hour, so its traffic is swapped for a compressed one here."""
    artifacts = tmp_path / "reports"
    shutil.copytree(EXAMPLES, artifacts, ignore=shutil.ignore_patterns("*.png"))
    inputs = DeployedInputs.from_options(RunOptions(artifacts_dir=artifacts))
    outcome = validate_live.deployed_plan(inputs, lambda line: None)
    assert outcome.artifact == load(artifacts / "plan-kokoro-82m.json", PlanArtifact)
    deployed = deploy(unique(), instances=2, metric_data=False)
    small = small_story()
    monkeypatch.setattr(validate_live, "traffic_for", lambda outcome, time_scale: small)
    # On the clock's 10 s periods, as CloudWatch holds a high-resolution metric.
    now = datetime.fromtimestamp(time.time() // 10 * 10, UTC)
    put_concurrency(
        deployed.endpoint,
        deployed.variant,
        [(now + timedelta(seconds=10 * i), 9.0) for i in range(-6, 18)],
    )
    clients = AwsClients(clock=Clock())
    autoscaling, stubber = stubbed_autoscaling([[]], resource=deployed.resource_id)
    clients._clients["application-autoscaling"] = autoscaling
    lines: list[str] = []
    with event_stream_server() as server:
        server.scripts[deployed.endpoint] = Script(messages=[(0.02, payload_part(PCM))])
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", server.url)
        run = validate_live.replay_deployed(
            outcome, tmp_path, lines.append, clients=clients, endpoint=deployed.endpoint
        )
    stubber.assert_no_pending_responses()
    assert run.rows
    assert {r["status"] for r in run.rows} == {"ok"}
    assert lines[0].startswith("validate_live: replaying ")
    assert (
        f"at 1/50 of its time) on {deployed.endpoint}/AllTraffic (2 instances serving" in lines[0]
    )
    assert run.t0_ns <= min(int(r["epoch_start_ns"]) for r in run.rows)
    assert len(run.log.initial) == 2
    # The per-container Maximum as CloudWatch holds it (2 instances serving: not halved).
    assert {d.in_flight_before for d in run.log.dispatches} == {9.0}
    assert run.q_max == outcome.artifact.queue_max_depth
    assert live.check_rejections(run.log.dispatches, run.q_max).ok
    assert not live.check_first_new_instance(run.log.events, run.t0_ns, run.traffic).ok
    readings = json.loads((tmp_path / "live.fleet.json").read_text())
    assert readings["endpoint"] == deployed.endpoint
    assert {(c["current"], c["desired"]) for c in readings["counts"]} == {(2, 2)}


# --- the scenario's choice of path ----------------------------------------------------------


@pytest.fixture
def scenario(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(
        test_validate_live=(ROOT / "scenarios" / "test_validate_live.py").read_text()
    )
    return pytester


def run_scenario(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-m", "validate_live", "-p", "no:cacheprovider", *args, timeout=120
    )


def test_a_plain_url_fails_in_one_line_saying_why(scenario: pytest.Pytester) -> None:
    result = run_scenario(scenario, "--endpoint-url", "http://127.0.0.1:9")
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines(
        ["*validate_live: error: --endpoint-url: a plain URL has no scaling activity*"]
    )
    assert "Traceback" not in result.stdout.str()


def test_the_endpoint_path_reads_the_plan_from_the_artifacts_dir(
    scenario: pytest.Pytester,
) -> None:
    result = run_scenario(scenario, "--endpoint", "speech-kokoro-82m")
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines(
        ["*validate_live: error: no plan at reports/plan-kokoro-82m.json: expected the deployed*"]
    )
    # A plan without the qmax and ttotal artifacts it was computed from: no curve, no policy.
    reports = scenario.path / "reports"
    reports.mkdir(exist_ok=True)
    plan = make_plan(model="kokoro-82m")
    save(plan, reports / "plan-kokoro-82m.json")
    result = run_scenario(scenario, "--endpoint", "speech-kokoro-82m")
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines(
        ["*validate_live: error: reports/plan-kokoro-82m.json: the simulated surge and*"]
    )
