"""Per-request metrics as CloudWatch embedded metric format (EMF) lines on standard output.

One JSON line per request, namespace ``TTS/Container``, dimension set ``[["Model"]]``:

- ``FirstChunkLatency`` (Milliseconds): start of synthesis (after the queue wait) to the first
  audio chunk ready; it feeds the FirstChunkLatencyP95 alarm;
- ``Latency`` (Milliseconds): request received to last byte handed to the server;
- ``AudioSeconds`` (Seconds): audio sent;
- ``QueueWait`` (Milliseconds): waiting for an inference worker;

with the properties ``request_id``, ``transport`` (http or websocket), ``status`` (ok, rejected,
invalid, not_ready, failed, cancelled, disconnected) and ``error`` (the error code, when there is
one). A metric without a value for the request (no audio came, say) is left out of the line.
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
}


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


def emf_record(
    metrics: RequestMetrics, model: str, timestamp_ms: int | None = None
) -> dict[str, Any]:
    """The EMF object for one request."""
    values = {
        "FirstChunkLatency": _ms(metrics.first_chunk_s),
        "Latency": _ms(metrics.latency_s),
        "AudioSeconds": None if metrics.audio_s is None else round(metrics.audio_s, 4),
        "QueueWait": _ms(metrics.queue_wait_s),
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
    return record


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


class MetricsLog:
    """Writes one EMF line per request."""

    def __init__(self, model: str, stream: TextIO | None = None) -> None:
        self.model = model
        self.stream = stream

    def record(self, metrics: RequestMetrics) -> None:
        line = json.dumps(emf_record(metrics, self.model), separators=(",", ":"))
        write_line(line, self.stream)
