"""Per-request metrics as CloudWatch embedded metric format (EMF) lines on standard output.

One JSON line per request, namespace ``TTS/Container``, dimension set ``[["Model"]]``:

- ``FirstChunkLatency`` (Milliseconds): start of synthesis (after the queue wait) to the first
  audio chunk ready; it feeds the FirstChunkLatencyP95 alarm;
- ``Latency`` (Milliseconds): request received to last byte handed to the server;
- ``AudioSeconds`` (Seconds): audio sent;
- ``QueueWait`` (Milliseconds): waiting for an inference worker (until the first segment ran);
- ``SegmentQueueWait`` (Milliseconds): per segment, from ready to run until it ran (EMF's list of
  values, the first `MAX_VALUES`);
- ``BatchSize`` (Count): per segment, how many segments its forward ran;
- ``DeadlineMisses`` (Count): segments that came after the stream's player had run dry;

with the properties ``request_id``, ``transport`` (http or websocket), ``status`` (ok, rejected,
invalid, not_ready, failed, cancelled, disconnected), ``error`` (the error code, when there is
one), and the server's labels ``engine`` (real or synthetic) and ``scheduler`` (fifo or edf).
A metric without a value for the request (no audio came, say) is left out of the line.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, TextIO

from tts_container.logline import write_line

NAMESPACE = "TTS/Container"
DIMENSIONS = [["Model"]]
METRIC_UNITS = {
    "FirstChunkLatency": "Milliseconds",
    "Latency": "Milliseconds",
    "AudioSeconds": "Seconds",
    "QueueWait": "Milliseconds",
    "SegmentQueueWait": "Milliseconds",
    "BatchSize": "Count",
    "DeadlineMisses": "Count",
}
# EMF takes at most 100 values for one metric in one line.
MAX_VALUES = 100


@dataclass
class RequestMetrics:
    request_id: str
    transport: str
    status: str
    latency_s: float | None = None
    first_chunk_s: float | None = None
    queue_wait_s: float | None = None
    audio_s: float | None = None
    error: str | None = None
    segment_waits_s: list[float] | None = None
    batch_sizes: list[int] | None = None
    deadline_misses: int | None = None


def emf_record(
    metrics: RequestMetrics,
    model: str,
    timestamp_ms: int | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The EMF object for one request."""
    waits = metrics.segment_waits_s or []
    values: dict[str, Any] = {
        "FirstChunkLatency": _ms(metrics.first_chunk_s),
        "Latency": _ms(metrics.latency_s),
        "AudioSeconds": None if metrics.audio_s is None else round(metrics.audio_s, 4),
        "QueueWait": _ms(metrics.queue_wait_s),
        "SegmentQueueWait": [_ms(w) for w in waits[:MAX_VALUES]] or None,
        "BatchSize": (metrics.batch_sizes or [])[:MAX_VALUES] or None,
        "DeadlineMisses": metrics.deadline_misses,
    }
    present = {name: value for name, value in values.items() if value is not None}
    record: dict[str, Any] = {
        "_aws": {
            "Timestamp": int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": DIMENSIONS,
                    "Metrics": [{"Name": name, "Unit": METRIC_UNITS[name]} for name in present],
                }
            ],
        },
        "Model": model,
        **present,
        "request_id": metrics.request_id,
        "transport": metrics.transport,
        "status": metrics.status,
    }
    if metrics.error is not None:
        record["error"] = metrics.error
    record.update(labels or {})
    return record


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


class MetricsLog:
    """Writes one EMF line per request, with the server's labels (engine, scheduler)."""

    def __init__(
        self, model: str, stream: TextIO | None = None, labels: dict[str, str] | None = None
    ) -> None:
        self.model = model
        self.stream = stream
        self.labels = dict(labels or {})

    def record(self, metrics: RequestMetrics) -> None:
        record = emf_record(metrics, self.model, labels=self.labels)
        line = json.dumps(record, separators=(",", ":"))
        write_line(line, self.stream)
