"""Order of exit: the load stops, the endpoint is restored, and only then the CloudWatch join."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import contextlib
from collections.abc import Iterator
from pathlib import Path

from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.lifecycle.snapshot import snapshot_path
from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.core.schema import Rung
from pytest_tts_scaling.endpoints.base import Endpoint, UrlEndpoint
from pytest_tts_scaling.endpoints.sagemaker import open_sagemaker_endpoint
from pytest_tts_scaling.endpoints.target import EndpointTarget
from pytest_tts_scaling.steps.qmax import run_ladder
from tests.aws.aws_helpers import deploy, desired_count, lock_keys, suspended, unique
from tests.factories import qmax_inputs

ALL_FALSE = dict.fromkeys(
    ("DynamicScalingInSuspended", "DynamicScalingOutSuspended", "ScheduledScalingSuspended"), False
)


class Recording(UrlEndpoint):
    """A URL endpoint that notes when it is frozen, thawed and joined."""

    def __init__(self, base_url: str, events: list[str]):
        super().__init__(base_url)
        self.events = events

    @contextlib.contextmanager
    def frozen(self) -> Iterator[Endpoint]:
        self.events.append("frozen")
        yield self
        self.events.append("block exit")

    def thaw(self) -> None:
        self.events.append("thaw")

    def transport(self, name: str, *, concurrency: int):  # type: ignore[no-untyped-def]
        self.events.append("load")
        return super().transport(name, concurrency=concurrency)

    def annotate_rungs(self, rungs: list[Rung]) -> list[Rung]:
        self.events.append("join")
        return rungs


def test_the_ladder_thaws_before_the_cloudwatch_join(tmp_path: Path) -> None:
    events: list[str] = []
    with SerialStreamServer(service_s=0.05, first_audio_s=0.02) as server:
        endpoint = Recording(server.base_url, events)
        settings = qmax_inputs(
            endpoint_url=server.base_url,
            ladder=(1,),
            hold_s=1.5,
            measure_s=1.0,
            gap_s=0.0,
            slo_ms=1000.0,
            artifacts_dir=tmp_path,
        )
        with endpoint.frozen() as frozen:
            run_ladder(frozen, settings, progress=lambda line: None)
    assert events[0] == "frozen"
    assert events[-3:] == ["thaw", "join", "block exit"]
    assert events.index("thaw") > max(i for i, e in enumerate(events) if e == "load")


def test_thaw_restores_the_endpoint_inside_the_frozen_block_and_the_exit_does_nothing_more(
    clients: AwsClients, tmp_path: Path
) -> None:
    d = deploy(unique(), instances=3)
    target = EndpointTarget(endpoint=d.endpoint, artifacts_dir=tmp_path)
    lines: list[str] = []
    with (
        open_sagemaker_endpoint(target, log=lines.append, clients=clients) as endpoint,
        endpoint.frozen() as frozen,
    ):
        assert desired_count(d.endpoint) == 1
        assert lock_keys(d.endpoint)
        frozen.thaw()
        # What the CloudWatch join then sees: the endpoint as it was, no lock, no snapshot.
        assert desired_count(d.endpoint) == 3
        assert suspended(d.resource_id) == ALL_FALSE
        assert lock_keys(d.endpoint) == []
        assert not snapshot_path(tmp_path, d.endpoint).exists()
        restored = len([line for line in lines if "scaling restored" in line])
    assert restored == 1
    assert len([line for line in lines if "scaling restored" in line]) == 1
