"""The scale-out's stages, each read from its own source while ttotal waits on the clock.

- `instance_logging`: firstEventTimestamp of the new instance's log stream `VARIANT/INSTANCE-ID`
  in `/aws/sagemaker/Endpoints/NAME`, the stream that was not there before; a bound on
  provisioning + image pull.
- `container_started` … `ready`: the container's own `TTS_MARKER` lines, read from the head of
  that stream.
- `in_service`: DescribeEndpoint's CurrentInstanceCount reaches the new count; the
  ActivatingTraffic StartTime of VariantStatus when SageMaker shows one, else the poll (a bound).

Each reader polls once per call and keeps what it found, so the caller's clock decides how long.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pytest_tts_scaling.aws.clients import error_code
from pytest_tts_scaling.aws.fingerprint import TERMINAL_STATUSES, describe_endpoint
from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.core.timeline import CONTAINER_MARKERS, Event, marker_events

# GetLogEvents pages read per poll, so one poll stays bounded on a chatty stream.
MAX_LOG_PAGES = 20


class ScaleOutError(RuntimeError):
    """The endpoint could not scale out: it failed, vanished, or the probe died."""


def log_group(endpoint: str) -> str:
    return f"/aws/sagemaker/Endpoints/{endpoint}"


def _from_ms(epoch_ms: float) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000.0, tz=UTC)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# --- the new instance's log stream -------------------------------------------------------------


def list_streams(logs: Any, group: str, prefix: str) -> dict[str, dict[str, Any]]:
    """The log streams of `group` whose names start with `prefix`; none when there is no group."""
    from botocore.exceptions import ClientError

    streams: dict[str, dict[str, Any]] = {}
    try:
        pages = logs.get_paginator("describe_log_streams").paginate(
            logGroupName=group, logStreamNamePrefix=prefix
        )
        for page in pages:
            for stream in page.get("logStreams", []):
                streams[stream["logStreamName"]] = stream
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return {}
        raise
    return streams


def container_markers(messages: Sequence[tuple[float, str]], *, source: str) -> list[Event]:
    """The container's startup markers among log messages ((timestamp ms, message) pairs).

    Parsed by `core.timeline.marker_events`, as the local scale timer reads them (`TTS_MARKER
    {"marker", "at", …}`, the time the container wrote); unknown marker names and malformed
    lines are skipped.
    """
    return [
        replace(event, source=source)
        for event in marker_events(list(messages))
        if event.stage in CONTAINER_MARKERS
    ]


@dataclass
class NewInstanceLog:
    """Finds the stream that appears after the scale-out and reads its head for markers."""

    logs: Any
    group: str
    variant: str
    known: frozenset[str]
    log: Progress = lambda line: None
    stream: str | None = None
    first_event_at: datetime | None = None
    markers: list[Event] = field(default_factory=list)
    _token: str | None = None

    @property
    def prefix(self) -> str:
        return f"{self.variant}/"

    @property
    def complete(self) -> bool:
        return self.first_event_at is not None and any(m.stage == "ready" for m in self.markers)

    def poll(self) -> None:
        if self.first_event_at is None:
            self._find()
        if self.stream is not None and not self.complete:
            self._read()

    def _find(self) -> None:
        new = {
            name: info
            for name, info in list_streams(self.logs, self.group, self.prefix).items()
            if name not in self.known
        }
        if not new:
            return
        # Two new streams would mean an instance was also replaced: the earliest is ours.
        name, info = min(
            new.items(),
            key=lambda item: (item[1].get("firstEventTimestamp") or float("inf"), item[0]),
        )
        if self.stream != name:
            self.stream = name
            self.log(f"ttotal: new instance log stream {self.group} {name}")
            if len(new) > 1:
                self.log(
                    f"ttotal: {len(new)} new log streams ({', '.join(sorted(new))}); timing {name}"
                )
        first = info.get("firstEventTimestamp")
        if first is not None:
            self.first_event_at = _from_ms(first)

    def _read(self) -> None:
        assert self.stream is not None
        seen = {m.stage for m in self.markers}
        for _ in range(MAX_LOG_PAGES):
            kwargs: dict[str, Any] = {
                "logGroupName": self.group,
                "logStreamName": self.stream,
                "startFromHead": True,
            }
            if self._token:
                kwargs["nextToken"] = self._token
            page = self.logs.get_log_events(**kwargs)
            source = f"log marker in {self.group} {self.stream}"
            for event in container_markers(
                [(e.get("timestamp", 0), e.get("message", "")) for e in page.get("events", [])],
                source=source,
            ):
                if event.stage not in seen:
                    seen.add(event.stage)
                    self.markers.append(event)
            token = page.get("nextForwardToken")
            if token is None or token == self._token:
                return  # the end of what has been delivered so far
            self._token = token
            if "ready" in seen:
                return

    def events(self) -> list[Event]:
        out = list(self.markers)
        if self.first_event_at is not None:
            out.append(
                Event(
                    "instance_logging",
                    self.first_event_at,
                    f"firstEventTimestamp of log stream {self.group} {self.stream} (a bound on "
                    "provisioning + image pull)",
                    bounded=True,
                )
            )
        return out


# --- in service ---------------------------------------------------------------------------------


@dataclass
class InServiceWatch:
    """Polls DescribeEndpoint until the variant's CurrentInstanceCount reaches `count`."""

    sagemaker: Any
    endpoint: str
    variant: str
    count: int
    since: datetime
    poll_s: float
    activating_at: datetime | None = None

    def poll(self, now: Callable[[], datetime]) -> Event | None:
        """The in_service event once the count is reached; `now` is read after the answer."""
        description = describe_endpoint(self.sagemaker, self.endpoint)
        if description is None:
            raise ScaleOutError(f"endpoint {self.endpoint} disappeared during the scale-out")
        status = str(description.get("EndpointStatus"))
        if status in TERMINAL_STATUSES or status == "RollingBack":
            reason = description.get("FailureReason")
            raise ScaleOutError(
                f"endpoint {self.endpoint} is {status} during the scale-out"
                + (f": {reason}" if reason else "")
            )
        variant = next(
            (
                v
                for v in description.get("ProductionVariants", [])
                if v.get("VariantName") == self.variant
            ),
            None,
        )
        if variant is None:
            raise ScaleOutError(f"variant {self.variant} of {self.endpoint} disappeared")
        for entry in variant.get("VariantStatus") or []:
            started = entry.get("StartTime")
            if entry.get("Status") == "ActivatingTraffic" and isinstance(started, datetime):
                started = _utc(started)
                if started >= self.since:
                    self.activating_at = started
        current = variant.get("CurrentInstanceCount")
        if current is None or current < self.count:
            return None
        if self.activating_at is not None:
            return Event(
                "in_service",
                self.activating_at,
                "DescribeEndpoint VariantStatus ActivatingTraffic StartTime (CurrentInstanceCount "
                f"reached {self.count})",
            )
        return Event(
            "in_service",
            now(),
            f"DescribeEndpoint CurrentInstanceCount reached {self.count} (polled every "
            f"{self.poll_s:g} s)",
            bounded=True,
        )
