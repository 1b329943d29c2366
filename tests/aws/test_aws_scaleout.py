"""ttotal on SageMaker: a forced scale-out against moto, the probe over the event-stream server.

:class:`tests.aws.provisioning.Provisioning` plays SageMaker's part of the scale-out in the fake
clock's time; when the instance enters service the probe's server turns fast (after a short real
delay), as the load is split over two instances.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from botocore.stub import Stubber

from pytest_tts_scaling.artifacts import load, save
from pytest_tts_scaling.aws.clients import AwsClients, WaitTimeout
from pytest_tts_scaling.aws.lifecycle.snapshot import snapshot_path
from pytest_tts_scaling.aws.scaleout.policy_lag import policy_lag_bound, read_policy_lag
from pytest_tts_scaling.aws.scaleout.stages import (
    InServiceWatch,
    NewInstanceLog,
    ScaleOutError,
    container_markers,
    log_group,
)
from pytest_tts_scaling.aws.scaling import ScalingScope
from pytest_tts_scaling.core.schema import (
    DeployedConfig,
    Provenance,
    QmaxArtifact,
    Rung,
    TtotalArtifact,
    ttotal_filename,
)
from pytest_tts_scaling.core.timeline import Event, assemble
from pytest_tts_scaling.endpoints.sagemaker import SageMakerEndpoint, open_sagemaker_endpoint
from pytest_tts_scaling.errors import InputError, MismatchError
from pytest_tts_scaling.steps.ttotal import run_ttotal
from pytest_tts_scaling.steps.ttotal.inputs import TtotalInputs
from pytest_tts_scaling.steps.ttotal.sagemaker import measure_sagemaker_ttotal
from tests.aws.aws_helpers import (
    ALL_FALSE,
    FakeClock,
    client,
    deploy,
    desired_count,
    suspended,
    unique,
)
from tests.aws.eventstream_server import (
    EventStreamServer,
    Script,
    payload_part,
)
from tests.aws.provisioning import STARTUP, Provisioning, existing_instance_log, marker
from tests.factories import make_qmax, make_rung, ttotal_inputs

SLUG = "g4dnxlarge-8b1b96bc"
PCM = b"\x01\x00" * 480


def qmax_artifact(*, slug: str = SLUG, transport: str = "response-stream") -> QmaxArtifact:
    """Rungs 1 and 2 measured: the probe runs at 2, recovery is judged against rung 1's p95."""

    def rung(concurrency: int, p95_ms: float) -> Rung:
        return make_rung(
            concurrency, ttfab_p95_ms=p95_ms, completed=100, measure_s=60, throughput_rps=10
        )

    return make_qmax(
        [rung(1, 80.0), rung(2, 150.0)],
        q_max=2,
        endpoint="speech-x",
        transport=transport,
        slug=slug,
        deployed_config=DeployedConfig(instance_type="ml.g4dn.xlarge", image_digest="sha256:8b"),
        q_max_bracketed=False,
        s_mean_s=0.06,
        s_p95_s=0.07,
        ttfab_p95_at_c1_ms=80.0,
        unbounded_queue=False,
        provenance=Provenance(
            origin="sagemaker:speech-x",
            run_id="qmax-run-1",
            measured_at="2026-01-01T00:00:00Z",
            tool_version="0",
        ),
    )


def settings_for(endpoint: str, tmp_path: Path, **overrides: Any) -> TtotalInputs:
    qmax_path = save(qmax_artifact(), tmp_path / "qmax.json")
    values: dict[str, Any] = {
        "endpoint": endpoint,
        "hold_s": 0.5,
        "measure_s": 0.3,
        "artifacts_dir": tmp_path,
        "qmax_artifact": qmax_path,
    }
    values.update(overrides)
    return ttotal_inputs(**values)


SLOW = Script(messages=[(0.25, payload_part(PCM))])  # one instance, overloaded: TTFAB ~250 ms
FAST = Script(messages=[(0.01, payload_part(PCM))])  # two instances: TTFAB ~10 ms
# The new instance takes half the probe once the probe has had this many more slow answers
# after it entered service: the recovery follows traffic, never a timer.
SLOW_AFTER_IN_SERVICE = 4


def test_forced_scale_out_end_to_end(
    clients: AwsClients,
    fake_clock: FakeClock,
    runtime: EventStreamServer,
    tmp_path: Path,
) -> None:
    fake_clock.start = fake_clock.start.replace(microsecond=0)  # log timestamps are in ms
    d = deploy(unique(), instances=2)
    existing_instance_log(d.endpoint)
    runtime.scripts[d.endpoint] = SLOW

    def share_the_load() -> None:  # the new instance takes half the probe, a little later
        runtime.switch_after(d.endpoint, SLOW_AFTER_IN_SERVICE, FAST)

    sim = Provisioning(fake_clock, d.endpoint, on_in_service=share_the_load).install(clients)
    settings = settings_for(d.endpoint, tmp_path)
    earlier = tmp_path / ttotal_filename("kokoro-82m", "forced", SLUG)
    earlier.write_text("{}\n")  # an earlier run's artifact: kept aside, not replaced
    lines: list[str] = []
    with open_sagemaker_endpoint(settings.target, log=lines.append, clients=clients) as endpoint:
        artifact, path = run_ttotal(endpoint, settings, progress=lines.append)

    assert path == earlier
    assert load(path, TtotalArtifact) == artifact
    [kept] = tmp_path.glob("ttotal-kokoro-82m-forced-g4dnxlarge-8b1b96bc.*Z.json")
    assert kept.read_text() == "{}\n"
    assert f"ttotal: kept the earlier {path} as {kept.name}" in lines
    by_stage = {s.stage: s for s in artifact.stages}
    assert list(by_stage) == [
        "load_applied",
        "desired_set",
        "instance_logging",
        "container_started",
        "framework_init",
        "weights_ready",
        "warmup_done",
        "ready",
        "in_service",
        "traffic_recovered",
    ]
    assert artifact.missing_stages == []
    assert artifact.out_of_order_stages == []
    elapsed = {name: s.elapsed_s for name, s in by_stage.items()}
    assert elapsed["instance_logging"] == 181.0
    assert by_stage["instance_logging"].bounded
    assert f"{log_group(d.endpoint)} AllTraffic/i-0new" in by_stage["instance_logging"].source
    for offset, name in STARTUP[1:]:
        assert elapsed[name] == offset
        assert not by_stage[name].bounded
        assert "log marker" in by_stage[name].source
    assert elapsed["in_service"] == 250.0  # the ActivatingTraffic StartTime, not the poll
    assert not by_stage["in_service"].bounded
    assert "ActivatingTraffic" in by_stage["in_service"].source
    # Seen in service at 255 s (fake); the probe's next answers stay slow (SLOW_AFTER_IN_SERVICE
    # of them), so the first full 0.3 s window under the threshold ends later still; the stage
    # being there at all says it recovered within the recovery grace, however busy the host.
    recovered = elapsed["traffic_recovered"]
    assert recovered is not None
    assert recovered >= 255.25
    assert artifact.dominant_stage == "instance_logging"
    assert artifact.t_measured_s == pytest.approx(recovered, abs=1e-3)
    assert artifact.policy_lag_bound_s == 60.0  # 10 s x 3 + the deployed 30 s cooldown
    assert artifact.policy_lag_source is not None
    assert f"policy {d.endpoint}-concurrency" in artifact.policy_lag_source
    assert "30 s scale-out cooldown" in artifact.policy_lag_source
    assert artifact.t_total_s == pytest.approx(recovered + 60.0, abs=1e-3)
    assert artifact.bounded
    assert artifact.trigger == "forced"
    assert artifact.qmax_run_id == "qmax-run-1"
    assert artifact.probe["concurrency"] == 2
    assert artifact.probe["post_scale_concurrency"] == 1
    assert artifact.probe["recovery_threshold_ms"] == 100.0
    assert artifact.probe["recovered"] is True
    assert artifact.model_extra is not None
    assert artifact.model_extra["scale_out"]["log_stream"] == "AllTraffic/i-0new"
    assert (
        artifact.model_extra["scale_out"]["from_instances"],
        artifact.model_extra["scale_out"]["to_instances"],
    ) == (1, 2)

    # Frozen to 1, forced to 2 = the deployed count: the restore leaves it there (no 2 -> 1 -> 2,
    # which would tear an instance down only to provision it again); scaling unsuspended.
    assert sim.updates == [1, 2]
    assert desired_count(d.endpoint) == 2
    assert suspended(d.resource_id) == ALL_FALSE
    assert not snapshot_path(tmp_path, d.endpoint).exists()
    # The probe went to the endpoint over InvokeEndpointWithResponseStream, before and after.
    paths = {r.path for r in runtime.received}
    assert paths == {f"/endpoints/{d.endpoint}/invocations-response-stream"}
    assert artifact.probe["ok"] == len(runtime.received)
    assert any("the clock runs" in line for line in lines)
    assert any("desired instance count already 2" in line for line in lines)


def test_a_failure_midway_restores_n_plus_one_straight_to_n_and_thaws(
    clients: AwsClients,
    fake_clock: FakeClock,
    runtime: EventStreamServer,
    tmp_path: Path,
) -> None:
    d = deploy(unique(), instances=3)
    existing_instance_log(d.endpoint)
    runtime.scripts[d.endpoint] = FAST
    sim = Provisioning(fake_clock, d.endpoint, fail_after_s=100.0).install(clients)
    settings = settings_for(d.endpoint, tmp_path)
    lines: list[str] = []
    with (
        open_sagemaker_endpoint(settings.target, log=lines.append, clients=clients) as endpoint,
        pytest.raises(RuntimeError, match="simulated crash"),
    ):
        run_ttotal(endpoint, settings, progress=lines.append)
    # The freeze's restore waited (fake time) until the endpoint was InService again, then set
    # the deployed count straight from the forced 2 to 3, and the flags.
    assert sim.updates == [1, 2, 3]
    assert sim.served
    assert desired_count(d.endpoint) == 3
    assert suspended(d.resource_id) == ALL_FALSE
    assert not snapshot_path(tmp_path, d.endpoint).exists()
    assert any("desired instance count 2 -> 3" in line for line in lines), lines
    assert not list(tmp_path.glob("ttotal-*.json"))


def test_an_instance_that_never_comes_is_a_bounded_wait(
    clients: AwsClients,
    fake_clock: FakeClock,
    runtime: EventStreamServer,
    tmp_path: Path,
) -> None:
    d = deploy(unique(), instances=1)
    existing_instance_log(d.endpoint)
    runtime.scripts[d.endpoint] = FAST
    sim = Provisioning(fake_clock, d.endpoint, in_service_after_s=1e9).install(clients)
    settings = settings_for(d.endpoint, tmp_path)
    qmax = qmax_artifact()
    lines: list[str] = []
    with (
        open_sagemaker_endpoint(settings.target, log=lines.append, clients=clients) as endpoint,
        pytest.raises(WaitTimeout, match="with 2 instances in service: not reached within 300 s"),
    ):
        measure_sagemaker_ttotal(endpoint, qmax, settings, progress=lines.append, timeout_s=300)
    # Stuck Updating: the freeze's restore gave up after its bound; the flags are restored, the
    # snapshot and lock are kept for thaw, and the forced count is still set.
    assert sim.updates == [2]
    assert fake_clock.t < 300 + 30 * 60 + 60
    assert any(f"tts-bench thaw --endpoint {d.endpoint} --artifacts-dir" in line for line in lines)
    assert suspended(d.resource_id) == ALL_FALSE
    assert snapshot_path(tmp_path, d.endpoint).exists()
    assert desired_count(d.endpoint) == 2


def test_no_scale_out_without_a_comparable_qmax(
    clients: AwsClients, fake_clock: FakeClock, tmp_path: Path
) -> None:
    d = deploy(unique(), instances=1)
    ops: list[str] = []
    clients.sagemaker.meta.events.register(
        "before-call.sagemaker.UpdateEndpointWeightsAndCapacities",
        lambda **kwargs: ops.append("update"),
    )
    settings = settings_for(d.endpoint, tmp_path)
    with open_sagemaker_endpoint(settings.target, log=print, clients=clients) as endpoint:
        with pytest.raises(MismatchError, match="field 'slug'"):
            measure_sagemaker_ttotal(
                endpoint, qmax_artifact(slug="g5xlarge-00000000"), settings, progress=print
            )
        with pytest.raises(MismatchError, match="field 'transport'"):
            measure_sagemaker_ttotal(
                endpoint, qmax_artifact(transport="bidi"), settings, progress=print
            )
        mismatch_ok = settings_for(d.endpoint, tmp_path, allow_config_mismatch=True)
        assert isinstance(endpoint, SageMakerEndpoint)
        endpoint.inference_component = "kokoro-ic"
        with pytest.raises(InputError, match=r"--inference-component\) kokoro-ic"):
            measure_sagemaker_ttotal(
                endpoint, qmax_artifact(slug="g5xlarge-00000000"), mismatch_ok, progress=print
            )
    assert ops == []
    assert not snapshot_path(tmp_path, d.endpoint).exists()


# --- the SageMaker-specific extraction, stage by stage ------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def put(endpoint: str, stream: str, lines: list[tuple[datetime, str]]) -> None:
    client("logs").put_log_events(
        logGroupName=log_group(endpoint),
        logStreamName=stream,
        logEvents=[{"timestamp": ms(at), "message": line} for at, line in lines],
    )


def test_new_stream_is_found_against_the_snapshot_and_read_from_its_head(
    aws_env: dict[str, str],
) -> None:
    endpoint = unique()
    logs = client("logs")
    now = datetime.now(UTC).replace(microsecond=0)
    existing_instance_log(endpoint)
    logs.create_log_stream(logGroupName=log_group(endpoint), logStreamName="Other/i-0xyz")
    reader = NewInstanceLog(
        logs, log_group(endpoint), "AllTraffic", frozenset({"AllTraffic/i-0old"})
    )
    reader.poll()
    assert reader.stream is None  # the old stream and another variant's are not new

    logs.create_log_stream(logGroupName=log_group(endpoint), logStreamName="AllTraffic/i-0new")
    reader.poll()
    assert reader.stream == "AllTraffic/i-0new"
    assert reader.first_event_at is None  # created, nothing delivered yet
    assert reader.events() == []

    put(
        endpoint,
        "AllTraffic/i-0new",
        [
            (now, "pulling weights"),
            (now + timedelta(seconds=1), marker("container_started", now, 0.0)),
            (now + timedelta(seconds=2), "TTS_MARKER {broken json"),
            (now + timedelta(seconds=3), marker("model_compiled", now, 1.0)),  # not a stage
            (now + timedelta(seconds=4), marker("framework_init", now + timedelta(seconds=4), 4)),
        ],
    )
    reader.poll()
    assert reader.first_event_at == now
    assert [m.stage for m in reader.markers] == ["container_started", "framework_init"]
    assert not reader.complete

    later = now + timedelta(seconds=30)
    put(
        endpoint,
        "AllTraffic/i-0new",
        [
            (later, marker("container_started", later, 0.0)),  # a restart: the first one counts
            (later, marker("weights_ready", later, 30.0)),
            (later + timedelta(seconds=5), marker("ready", later + timedelta(seconds=5), 35)),
        ],
    )
    reader.poll()
    assert [m.stage for m in reader.markers] == [
        "container_started",
        "framework_init",
        "weights_ready",
        "ready",
    ]
    assert reader.complete
    events = {e.stage: e for e in reader.events()}
    assert events["container_started"].at == now
    assert events["instance_logging"].at == now
    assert events["instance_logging"].bounded
    assert not events["ready"].bounded
    assert all("AllTraffic/i-0new" in e.source for e in events.values())


def test_no_log_group_means_no_stream_yet(aws_env: dict[str, str]) -> None:
    reader = NewInstanceLog(client("logs"), log_group(unique()), "AllTraffic", frozenset())
    reader.poll()
    assert reader.stream is None
    assert reader.events() == []


def desired_at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sagemaker_timeline(events: list[Event]) -> Any:
    from pytest_tts_scaling.steps.ttotal.sagemaker import SAGEMAKER_STAGES

    base = [
        Event("load_applied", desired_at(-30), "probe"),
        Event("desired_set", desired_at(0), "update"),
    ]
    return assemble([*base, *events], expected=SAGEMAKER_STAGES)


def test_missing_markers_are_reported_not_invented() -> None:
    lines = [
        (ms(desired_at(181)), "starting"),
        (ms(desired_at(190)), marker("container_started", desired_at(190), 0)),
        (ms(desired_at(245)), marker("ready", desired_at(245), 55)),
    ]
    found = container_markers(lines, source="log")
    timeline = sagemaker_timeline(
        [
            Event("instance_logging", desired_at(181), "stream", bounded=True),
            *found,
            Event("in_service", desired_at(255), "poll", bounded=True),
        ]
    )
    assert timeline.missing == [
        "framework_init",
        "weights_ready",
        "warmup_done",
        "traffic_recovered",
    ]
    assert timeline.t_measured_s == 255.0
    assert timeline.out_of_order == []


def test_a_marker_from_a_skewed_container_clock_is_out_of_order() -> None:
    # The container's clock says it started before its first log line reached CloudWatch.
    found = container_markers(
        [(ms(desired_at(181)), marker("container_started", desired_at(178), 0))], source="log"
    )
    timeline = sagemaker_timeline(
        [Event("instance_logging", desired_at(181), "stream", bounded=True), *found]
    )
    assert timeline.out_of_order == ["container_started"]
    stages = {s.stage: s for s in timeline.stages}
    assert stages["container_started"].at == "2026-01-01T00:02:58Z"  # kept as read
    assert all(s.share is None or s.share >= 0 for s in timeline.stages)


def describe_response(
    current: int, *, status: str = "Updating", variant_status: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    variant: dict[str, Any] = {
        "VariantName": "AllTraffic",
        "CurrentInstanceCount": current,
        "DesiredInstanceCount": 2,
    }
    if variant_status is not None:
        variant["VariantStatus"] = variant_status
    return {
        "EndpointName": "speech-x",
        "EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/speech-x",
        "EndpointConfigName": "speech-x-config",
        "ProductionVariants": [variant],
        "EndpointStatus": status,
        "CreationTime": T0,
        "LastModifiedTime": T0,
        **({"FailureReason": "CapacityError: no ml.g4dn.xlarge"} if status == "Failed" else {}),
    }


@pytest.fixture
def stubbed_sagemaker() -> Iterator[tuple[Any, Stubber]]:
    sagemaker = boto3.client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(sagemaker) as stub:
        yield sagemaker, stub
        stub.assert_no_pending_responses()


def test_in_service_is_a_bound_when_only_polled(stubbed_sagemaker: tuple[Any, Stubber]) -> None:
    sagemaker, stub = stubbed_sagemaker
    stub.add_response("describe_endpoint", describe_response(1))
    stub.add_response("describe_endpoint", describe_response(2, status="InService"))
    watch = InServiceWatch(sagemaker, "speech-x", "AllTraffic", 2, since=T0, poll_s=5.0)
    assert watch.poll(lambda: desired_at(250)) is None
    seen = watch.poll(lambda: desired_at(255))
    assert seen is not None
    assert (seen.stage, seen.at, seen.bounded) == ("in_service", desired_at(255), True)
    assert "CurrentInstanceCount reached 2 (polled every 5 s)" in seen.source


def test_in_service_takes_activating_traffic_start_time(
    stubbed_sagemaker: tuple[Any, Stubber],
) -> None:
    sagemaker, stub = stubbed_sagemaker
    stale = {"Status": "ActivatingTraffic", "StartTime": desired_at(-600)}  # an older change
    stub.add_response("describe_endpoint", describe_response(1, variant_status=[stale]))
    activating = {"Status": "ActivatingTraffic", "StartTime": desired_at(248.5)}
    stub.add_response("describe_endpoint", describe_response(1, variant_status=[activating]))
    stub.add_response("describe_endpoint", describe_response(2, status="InService"))
    watch = InServiceWatch(sagemaker, "speech-x", "AllTraffic", 2, since=T0, poll_s=5.0)
    assert watch.poll(lambda: desired_at(245)) is None
    assert watch.activating_at is None
    assert watch.poll(lambda: desired_at(250)) is None
    seen = watch.poll(lambda: desired_at(255))
    assert seen is not None
    assert (seen.at, seen.bounded) == (desired_at(248.5), False)


def test_a_failed_scale_out_stops_the_watch(stubbed_sagemaker: tuple[Any, Stubber]) -> None:
    sagemaker, stub = stubbed_sagemaker
    stub.add_response("describe_endpoint", describe_response(1, status="Failed"))
    watch = InServiceWatch(sagemaker, "speech-x", "AllTraffic", 2, since=T0, poll_s=5.0)
    with pytest.raises(ScaleOutError, match="Failed during the scale-out: CapacityError"):
        watch.poll(lambda: desired_at(30))


# --- the policy's detection lag -----------------------------------------------------------------

RESOURCE = "endpoint/speech-x/variant/AllTraffic"


def tracking(name: str, metric: str, cooldown: int | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "TargetValue": 37.5,
        "PredefinedMetricSpecification": {"PredefinedMetricType": metric},
    }
    if cooldown is not None:
        config["ScaleOutCooldown"] = cooldown
    return {
        "PolicyName": name,
        "PolicyARN": f"arn:policy/{name}",
        "ResourceId": RESOURCE,
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": config,
    }


def step(name: str, adjustment: int, cooldown: int) -> dict[str, Any]:
    return {
        "PolicyName": name,
        "PolicyARN": f"arn:policy/{name}",
        "ResourceId": RESOURCE,
        "PolicyType": "StepScaling",
        "StepScalingPolicyConfiguration": {
            "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": adjustment}],
            "Cooldown": cooldown,
        },
    }


def alarm(name: str, policy: str, period: int, periods: int, op: str) -> dict[str, Any]:
    return {
        "AlarmName": name,
        "AlarmActions": [f"arn:policy/{policy}"],
        "Period": period,
        "EvaluationPeriods": periods,
        "ComparisonOperator": op,
    }


HIGH_RES = "SageMakerVariantConcurrentRequestsPerModelHighResolution"


def test_lag_from_the_tracking_policys_own_alarm() -> None:
    lag, source = policy_lag_bound(
        [tracking("tt", HIGH_RES, cooldown=30)],
        [
            alarm("TargetTracking-AlarmHigh-1", "tt", 10, 3, "GreaterThanThreshold"),
            alarm("TargetTracking-AlarmLow-1", "tt", 60, 15, "LessThanThreshold"),
        ],
        RESOURCE,
    )
    assert lag == 60.0
    assert source == (
        "policy tt (its alarm TargetTracking-AlarmHigh-1): 10 s period x 3 evaluation periods "
        "+ 30 s scale-out cooldown"
    )


def test_lag_from_the_metric_and_the_default_cooldown() -> None:
    lag, source = policy_lag_bound(
        [tracking("tt", "SageMakerVariantInvocationsPerInstance")], [], RESOURCE
    )
    assert lag == 60 * 3 + 300
    assert "60 s period x 3 evaluation periods" in source
    assert "300 s scale-out cooldown (the default)" in source


def test_the_quickest_scale_out_policy_decides_and_scale_in_is_ignored() -> None:
    policies = [
        tracking("slow", "SageMakerVariantInvocationsPerInstance", cooldown=60),
        step("out", +1, 20),
        step("in", -1, 5),
    ]
    alarms = [
        alarm("out-alarm", "out", 10, 2, "GreaterThanOrEqualToThreshold"),
        alarm("in-alarm", "in", 10, 1, "LessThanOrEqualToThreshold"),
    ]
    lag, source = policy_lag_bound(policies, alarms, RESOURCE)
    assert lag == 10 * 2 + 20
    assert source.startswith("policy out (step scaling on alarm out-alarm)")


def test_without_a_scale_out_policy_the_lag_is_assumed_and_says_so() -> None:
    lag, source = policy_lag_bound([step("in", -1, 300), step("silent", +1, 30)], [], RESOURCE)
    assert lag == 60.0
    assert source.startswith(f"assumed, no scale-out policy deployed on {RESOURCE}")


def test_lag_is_read_from_the_deployed_policy(clients: AwsClients) -> None:
    d = deploy(unique(), scale_out_cooldown=45)
    lag, source = read_policy_lag(clients, ScalingScope(d.endpoint, "AllTraffic"))
    assert lag == 10 * 3 + 45
    assert f"policy {d.endpoint}-concurrency (target tracking on {HIGH_RES})" in source
    bare = deploy(unique(), tracking=False, step=False)
    lag, source = read_policy_lag(clients, ScalingScope(bare.endpoint, "AllTraffic"))
    assert (lag, source.split(",")[0]) == (60.0, "assumed")
