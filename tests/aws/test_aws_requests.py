"""Every AWS request the package can build is valid against botocore's service models.

The package's own functions run (the control plane on moto, what moto lacks through a botocore
Stubber or the local event-stream server, the Locust user in a subprocess, the weights-sync
handler with a stubbed CodeBuild) while every botocore call is recorded as it leaves the
client, with the source lines it came from. Each request is then checked against its service
model: the operation exists, `ParamValidator` finds nothing (names, types, required members,
ranges), and every enum value is one of the model's (which ParamValidator does not check).

The guard: every AWS call site in the source (tests/aws/aws_calls.py reads them) must have made
at least one of the recorded requests, so a new call without a test here fails.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))
pytest.importorskip("aiobotocore", reason=needs_extra("aiobotocore"))

import asyncio
import copy
import pickle
import subprocess
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
from aiobotocore.client import AioBaseClient
from botocore.client import BaseClient
from botocore.model import ListShape, MapShape, Shape, StructureShape
from botocore.stub import Stubber
from botocore.validate import ParamValidator

from pytest_tts_scaling.aws.clients import AwsClients
from tests.aws.aws_calls import HTTP2_SERVICE, ROOT, SOURCES, CallSite, call_sites
from tests.aws.aws_helpers import client, put_concurrency, run_control_plane, unique
from tests.aws.eventstream_server import EventStreamServer, Script, payload_part
from tests.aws.test_aws_inference_component import (  # noqa: F401 (the fixture)
    EP,
    Stubs,
    expect_copies,
    expect_deployment,
    stubs,
)
from tests.aws.test_aws_live import SCOPE, activity, at, stubbed_autoscaling

# Calls no botocore model describes, and why they are not checked here.
NOT_IN_BOTOCORE = {
    HTTP2_SERVICE: "aws-sdk-sagemaker-runtime-http2 builds its own typed input (not installed "
    "in CI); its one operation is not in botocore's models",
}


@dataclass(frozen=True)
class Request:
    """One request as the client received it, and the source lines on the stack."""

    service: str
    operation: str
    params: dict[str, Any]
    frames: tuple[tuple[str, int], ...]

    def came_from(self, site: CallSite) -> bool:
        low, high = site.function
        return (self.service, self.operation) == (site.service, site.operation) and any(
            path == site.path and low <= line <= high for path, line in self.frames
        )


def source_frames() -> tuple[tuple[str, int], ...]:
    """(path, line) of every frame on the stack in the package's or infra's source."""
    out = []
    for frame in traceback.extract_stack():
        path = Path(frame.filename)
        if any(path.is_relative_to(folder) for folder in SOURCES) and frame.lineno:
            out.append((path.relative_to(ROOT).as_posix(), frame.lineno))
    return tuple(out)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Request]:
    """Every botocore request made from now on, sync or async, before it is sent."""
    seen: list[Request] = []

    def note(client: Any, operation: str, params: Mapping[str, Any]) -> None:
        service = client.meta.service_model.service_name
        seen.append(Request(service, operation, copy.deepcopy(dict(params)), source_frames()))

    sync_call = BaseClient._make_api_call
    async_call = AioBaseClient._make_api_call

    def recorded_sync(self: Any, operation: str, params: dict[str, Any]) -> Any:
        note(self, operation, params)
        return sync_call(self, operation, params)

    async def recorded_async(self: Any, operation: str, params: dict[str, Any]) -> Any:
        note(self, operation, params)
        return await async_call(self, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", recorded_sync)
    monkeypatch.setattr(AioBaseClient, "_make_api_call", recorded_async)
    return seen


# --- the check ----------------------------------------------------------------------------------


def problems(service: str, operation: str, params: Mapping[str, Any]) -> list[str]:
    """What the service model says is wrong with one request; empty when it is valid."""
    model = botocore.session.get_session().get_service_model(service)
    if operation not in model.operation_names:
        return [f"{service} has no operation {operation}"]
    shape = model.operation_model(operation).input_shape
    found: list[str] = []
    report = ParamValidator().validate(dict(params), shape)
    if report.has_errors():
        found.append(report.generate_report())
    found += _enum_problems(params, shape, operation)
    return found


def _enum_problems(value: Any, shape: Shape | None, path: str) -> list[str]:
    if shape is None:
        return []
    if isinstance(shape, StructureShape) and isinstance(value, Mapping):
        return [
            problem
            for name, inner in value.items()
            if name in shape.members
            for problem in _enum_problems(inner, shape.members[name], f"{path}.{name}")
        ]
    if isinstance(shape, ListShape) and isinstance(value, list | tuple):
        return [
            problem
            for i, inner in enumerate(value)
            for problem in _enum_problems(inner, shape.member, f"{path}[{i}]")
        ]
    if isinstance(shape, MapShape) and isinstance(value, Mapping):
        return [
            problem
            for key, inner in value.items()
            for problem in _enum_problems(key, shape.key, f"{path} key")
            + _enum_problems(inner, shape.value, f"{path}[{key}]")
        ]
    allowed = getattr(shape, "enum", None)
    if allowed and isinstance(value, str) and value not in allowed:
        return [f"{path}: {value!r} is not one of {sorted(allowed)}"]
    return []


def uncovered(sites: list[CallSite], requests: list[Request]) -> list[CallSite]:
    """The call sites none of the requests came from (the ones botocore cannot check left out)."""
    return [
        site
        for site in sites
        if site.service not in NOT_IN_BOTOCORE and not any(r.came_from(site) for r in requests)
    ]


# --- the package's own functions, every path that calls AWS -------------------------------------


def inference_component_stubbed(stubbed: Stubs) -> None:
    """A component's deployment read, its scaling read and its copies set (moto has no
    inference components)."""
    from pytest_tts_scaling.aws import scaling
    from pytest_tts_scaling.aws.fingerprint import read_deployment
    from pytest_tts_scaling.aws.lifecycle.capacity import Capacity

    expect_deployment(stubbed, "kokoro-ic")
    read_deployment(stubbed.clients.sagemaker, EP, "kokoro-ic")
    expect_copies(stubbed, "kokoro-ic", 2)
    Capacity(stubbed.clients, EP, "AllTraffic", "kokoro-ic").set(2)
    resource = scaling.component_resource_id("kokoro-ic")
    stubbed.autoscaling.add_response("describe_scalable_targets", {"ScalableTargets": []})
    scaling.targets_for_resource(stubbed.clients.autoscaling, resource)
    stubbed.autoscaling.add_response("describe_scaling_policies", {"ScalingPolicies": []})
    scaling.policies_for_resource(stubbed.clients.autoscaling, resource)


def validate_live_readings(clients: AwsClients) -> None:
    """Scaling activities (Stubber: moto has none) and the in-flight metric (moto)."""
    from pytest_tts_scaling.aws.checks import live

    autoscaling, stubber = stubbed_autoscaling([[activity(30, 3, end_s=200)]])
    live.scaling_activities(autoscaling, SCOPE, at(0), at(600))
    stubber.assert_no_pending_responses()
    endpoint = unique()
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=20)
    put_concurrency(endpoint, "AllTraffic", [(start + timedelta(seconds=10), 2.0)])
    scope = live.ScalingScope(endpoint, "AllTraffic")
    live.concurrency_maxima(
        clients.cloudwatch, scope, start, start + timedelta(minutes=1), clock=clients.clock
    )


def ttotal_log_reads() -> None:
    """The new instance's log stream found and read (CloudWatch Logs on moto)."""
    from pytest_tts_scaling.aws.scaleout.stages import NewInstanceLog, log_group

    logs = client("logs")
    group = log_group(unique())
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName="AllTraffic/i-0abc")
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    logs.put_log_events(
        logGroupName=group,
        logStreamName="AllTraffic/i-0abc",
        logEvents=[{"timestamp": now_ms, "message": "starting"}],
    )
    NewInstanceLog(logs, group, "AllTraffic", frozenset()).poll()


def response_stream(runtime: EventStreamServer) -> None:
    """One invocation through the qmax engine's transport (aiobotocore)."""
    from pytest_tts_scaling.core.records import RequestSpec, StreamTimer
    from pytest_tts_scaling.load.transports.sagemaker_stream import SageMakerStreamTransport

    runtime.scripts["speech-req"] = Script(messages=[(0.0, payload_part(b"\x01\x00" * 100))])

    async def send() -> None:
        transport = SageMakerStreamTransport("speech-req", concurrency=1, variant="AllTraffic")
        async with transport, transport.session() as session:
            spec = RequestSpec(request_id="r1", body={"text": "Hi."}, component="kokoro-ic")
            await session.send(spec, StreamTimer(spec.audio))

    asyncio.run(send())


USER_SCRIPT = """
import pickle, sys
from types import SimpleNamespace

from pytest_tts_scaling.fleet.user import SageMakerStreamUser  # Locust's gevent first
from botocore.client import BaseClient
from tests.aws.test_aws_requests import Request, source_frames

seen = []
sent = BaseClient._make_api_call

def recorded(self, operation, params):
    service = self.meta.service_model.service_name
    seen.append(Request(service, operation, dict(params), source_frames()))
    return sent(self, operation, params)

BaseClient._make_api_call = recorded
from pytest_tts_scaling.core.records import RequestSpec, StreamTimer

state = SimpleNamespace(config=SimpleNamespace(users=1, target="speech-req"))
user = SimpleNamespace(state=state, client=SageMakerStreamUser.client)
spec = RequestSpec(request_id="r1", body={"text": "Hi."})
SageMakerStreamUser.exchange(user, spec, StreamTimer(spec.audio))
with open(sys.argv[1], "wb") as sink:
    pickle.dump(seen, sink)
"""


def locust_user(runtime: EventStreamServer, tmp_path: Path) -> list[Request]:
    """The load command's boto3 user, in a process of its own (Locust patches the standard
    library with gevent on import)."""
    runtime.scripts["speech-req"] = Script(messages=[(0.0, payload_part(b"\x01\x00" * 100))])
    out = tmp_path / "user-requests.pickle"
    subprocess.run([sys.executable, "-c", USER_SCRIPT, str(out)], cwd=ROOT, check=True, timeout=120)
    requests: list[Request] = pickle.loads(out.read_bytes())
    return requests


def weights_sync_handler() -> None:
    """The custom resource's two handlers, CodeBuild stubbed."""
    from speech_infra.handlers.weights_sync import is_complete, on_event

    codebuild = boto3.client(
        "codebuild", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    props = {
        "ProjectName": "WeightsSyncProject",
        "ModelName": "kokoro-82m",
        "RepoId": "hexgrad/Kokoro-82M",
        "Revision": "0123456789abcdef0123456789abcdef01234567",
        "AllowPatterns": ["config.json"],
        "S3Uri": "s3://bucket/models/kokoro-82m/0123456789abcdef0123456789abcdef01234567/",
    }
    with Stubber(codebuild) as stubber:
        stubber.add_response("start_build", {"build": {"id": "WeightsSyncProject:1"}})
        stubber.add_response(
            "batch_get_builds", {"builds": [{"id": "x", "buildStatus": "SUCCEEDED"}]}
        )
        started = on_event({"RequestType": "Create", "ResourceProperties": props}, None, codebuild)
        is_complete({"RequestType": "Create", "Data": started["Data"]}, None, codebuild)


@pytest.fixture
def every_path(
    recorded: list[Request],
    clients: AwsClients,
    stubs: Stubs,  # noqa: F811 (the fixture imported above)
    runtime: EventStreamServer,
    tmp_path: Path,
) -> list[Request]:
    run_control_plane(clients, tmp_path)
    inference_component_stubbed(stubs)
    validate_live_readings(clients)
    ttotal_log_reads()
    response_stream(runtime)
    weights_sync_handler()
    return [*recorded, *locust_user(runtime, tmp_path)]


# --- the tests ----------------------------------------------------------------------------------


def test_every_request_the_package_builds_is_valid_against_its_service_model(
    every_path: list[Request],
) -> None:
    package = [r for r in every_path if r.frames]
    assert len({(r.service, r.operation) for r in package}) >= 20
    invalid = {
        f"{r.service}.{r.operation} from {r.frames[-1][0]}:{r.frames[-1][1]}": found
        for r in package
        if (found := problems(r.service, r.operation, r.params))
    }
    assert invalid == {}


def test_every_aws_call_in_the_source_made_a_validated_request(
    every_path: list[Request],
) -> None:
    missing = uncovered(call_sites(), [r for r in every_path if r.frames])
    assert missing == [], (
        "AWS calls with no request in tests/aws/test_aws_requests.py: "
        + ", ".join(map(str, missing))
    )


def test_the_check_finds_a_bad_enum_a_bad_parameter_and_an_unknown_operation() -> None:
    assert problems(
        "cloudwatch",
        "GetMetricStatistics",
        {
            "Namespace": "AWS/SageMaker",
            "MetricName": "ConcurrentRequestsPerModel",
            "StartTime": at(0),
            "EndTime": at(60),
            "Period": 10,
            "Statistics": ["Max"],
        },
    ) == [
        "GetMetricStatistics.Statistics[0]: 'Max' is not one of ['Average', 'Maximum', "
        "'Minimum', 'SampleCount', 'Sum']"
    ]
    (report,) = problems("sagemaker", "DescribeEndpoint", {"Endpoint": "speech-x"})
    assert 'Missing required parameter in input: "EndpointName"' in report
    assert 'Unknown parameter in input: "Endpoint"' in report
    assert problems("sagemaker", "DescribeEndpoints", {}) == [
        "sagemaker has no operation DescribeEndpoints"
    ]


def test_the_guard_names_a_call_site_no_request_came_from(tmp_path: Path) -> None:
    site = CallSite("pytest_tts_scaling/aws/new.py", 12, (10, 14), "sagemaker", "DescribeEndpoint")
    elsewhere = Request("sagemaker", "DescribeEndpoint", {}, (("pytest_tts_scaling/aws/x.py", 12),))
    inside = Request("sagemaker", "DescribeEndpoint", {}, (("pytest_tts_scaling/aws/new.py", 13),))
    other = Request("sagemaker", "DescribeModel", {}, (("pytest_tts_scaling/aws/new.py", 12),))
    assert uncovered([site], [elsewhere, other]) == [site]
    assert uncovered([site], [inside]) == []
