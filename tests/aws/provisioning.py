"""SageMaker's part of a scale-out, played against moto in a fake clock's time.

moto applies UpdateEndpointWeightsAndCapacities at once (CurrentInstanceCount jumps to the new
count) and creates no log streams, so :class:`Provisioning` plays SageMaker's part:

- moto stays the truth for what was asked (DesiredInstanceCount); until the scripted in-service
  moment the simulator overlays DescribeEndpoint's answer the way SageMaker answers while it
  provisions: EndpointStatus Updating, CurrentInstanceCount still the old count, a VariantStatus
  entry (Updating, then ActivatingTraffic with its StartTime);
- the new instance's log stream is created in moto's CloudWatch Logs when the fake time reaches
  its first line, and each scripted line (startup noise and `TTS_MARKER` lines) is put when the
  fake time reaches it, so the code under test finds the stream and reads markers as they arrive;
- when the instance enters service it calls `on_in_service` once.

Only the first scale-out is simulated; later capacity changes (the scale-back, the restore) pass
straight through to moto.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.scaleout.stages import log_group
from tests.aws.aws_helpers import FakeClock, client, desired_count


def marker(name: str, at: datetime, elapsed: float) -> str:
    stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "TTS_MARKER " + json.dumps({"marker": name, "at": stamp, "elapsed_s": elapsed})


# Seconds after the scale-out request: what the new instance logs, as the source measured it.
STARTUP = (
    (181.0, "Starting the container"),
    (190.0, "container_started"),
    (200.0, "framework_init"),
    (230.0, "weights_ready"),
    (240.0, "warmup_done"),
    (245.0, "ready"),
)
MARKERS = {name for _, name in STARTUP[1:]}


@dataclass
class Provisioning:
    """SageMaker's side of the first scale-out of `endpoint`, in fake time (see the module doc)."""

    clock: FakeClock
    endpoint: str
    variant: str = "AllTraffic"
    instance: str = "i-0new"
    startup: tuple[tuple[float, str], ...] = STARTUP
    activating_after_s: float | None = 250.0
    in_service_after_s: float = 255.0
    fail_after_s: float | None = None
    on_in_service: Callable[[], None] = lambda: None
    requested_at: float | None = None
    requested_count: int | None = None
    settled: bool = False
    served: bool = False
    failed: bool = False
    written: int = 0
    updates: list[int] = field(default_factory=list)

    def install(self, clients: AwsClients) -> Provisioning:
        events = clients.sagemaker.meta.events
        events.register(
            "before-parameter-build.sagemaker.UpdateEndpointWeightsAndCapacities", self._on_update
        )
        events.register("after-call.sagemaker.DescribeEndpoint", self._on_describe)
        self.clock.on_sleep = self._tick
        return self

    def at(self, offset_s: float) -> datetime:
        assert self.requested_at is not None
        return self.clock.start + timedelta(seconds=self.requested_at + offset_s)

    @property
    def elapsed(self) -> float | None:
        return None if self.requested_at is None else self.clock.t - self.requested_at

    def _on_update(self, params: dict[str, Any], **kwargs: Any) -> None:
        count = params["DesiredWeightsAndCapacities"][0]["DesiredInstanceCount"]
        self.updates.append(count)
        if self.requested_at is None and count > desired_count(self.endpoint):
            self.requested_at, self.requested_count = self.clock.t, count
        elif self.requested_at is not None:
            self.settled = True  # a later change: moto's answer is the truth from here on

    def _on_describe(self, parsed: dict[str, Any], **kwargs: Any) -> None:
        elapsed = self.elapsed
        if elapsed is None or self.settled or self.requested_count is None:
            return
        if elapsed >= self.in_service_after_s:
            if not self.served:
                self.served = True
                self.on_in_service()
            return
        variant = next(v for v in parsed["ProductionVariants"] if v["VariantName"] == self.variant)
        parsed["EndpointStatus"] = "Updating"
        variant["CurrentInstanceCount"] = self.requested_count - 1
        activating = self.activating_after_s is not None and elapsed >= self.activating_after_s
        variant["VariantStatus"] = [
            {
                "Status": "ActivatingTraffic" if activating else "Updating",
                "StartTime": self.at(self.activating_after_s if activating else 0.0),  # type: ignore[arg-type]
            }
        ]

    def _tick(self, sleeps: int) -> None:
        elapsed = self.elapsed
        if elapsed is None:
            return
        if self.fail_after_s is not None and elapsed >= self.fail_after_s and not self.failed:
            self.failed = True
            raise RuntimeError("simulated crash in the middle of the scale-out")
        due = [(offset, line) for offset, line in self.startup[self.written :] if offset <= elapsed]
        if not due:
            return
        logs = client("logs")
        stream = f"{self.variant}/{self.instance}"
        if self.written == 0:
            logs.create_log_stream(logGroupName=log_group(self.endpoint), logStreamName=stream)
        logs.put_log_events(
            logGroupName=log_group(self.endpoint),
            logStreamName=stream,
            logEvents=[
                {
                    "timestamp": int(self.at(offset).timestamp() * 1000),
                    "message": marker(line, self.at(offset), offset - 190.0)
                    if line in MARKERS
                    else line,
                }
                for offset, line in due
            ],
        )
        self.written += len(due)


def existing_instance_log(endpoint: str) -> None:
    """The frozen instance's stream, there before the scale-out."""
    logs = client("logs")
    logs.create_log_group(logGroupName=log_group(endpoint))
    logs.create_log_stream(logGroupName=log_group(endpoint), logStreamName="AllTraffic/i-0old")
    logs.put_log_events(
        logGroupName=log_group(endpoint),
        logStreamName="AllTraffic/i-0old",
        logEvents=[
            {
                "timestamp": int((datetime.now(UTC) - timedelta(hours=1)).timestamp() * 1000),
                "message": marker("ready", datetime.now(UTC) - timedelta(hours=1), 60.0),
            }
        ],
    )
