"""`tts-bench load --endpoint NAME`: the SageMaker response stream through boto3 in Locust.

Against the local event-stream server (moto has no InvokeEndpointWithResponseStream): TTFAB is
the first PayloadPart that carries audio, never the headers or an empty part; the admission
gate's 503 inside a ModelError is a rejection, as in the qmax engine.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.aws.eventstream_server import (
    EventStreamServer,
    Script,
    event_stream_server,
    gate_full,
    payload_part,
)

PCM = b"\x01\x00" * 2400  # 0.1 s at 24 kHz, 16-bit mono


@pytest.fixture
def server() -> Iterator[EventStreamServer]:
    with event_stream_server() as srv:
        yield srv


def load(server: EventStreamServer, tmp_path: Path, *args: str) -> list[dict[str, object]]:
    empty = tmp_path / "aws-config"
    empty.write_text("")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "AWS_ENDPOINT_URL": server.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
    }
    records = tmp_path / "load.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest_tts_scaling.cli", "load", *args, "--records", str(records)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert records.exists(), done.stderr[-2000:]
    return [json.loads(line) for line in records.read_text().splitlines()]


def test_ttfab_is_the_first_payload_part_with_audio(
    server: EventStreamServer, tmp_path: Path
) -> None:
    server.scripts["speech-ok"] = Script(
        messages=[(0.0, payload_part(b"")), (0.2, payload_part(PCM)), (0.05, payload_part(PCM))]
    )
    rows = load(server, tmp_path, "--endpoint", "speech-ok", "--rate", "4", "--duration", "1")
    assert len(rows) == 4
    assert {r["status"] for r in rows} == {"ok"}
    assert all(float(str(r["ttfab_ms"])) >= 200.0 for r in rows)
    assert all(r["audio_bytes"] == 2 * len(PCM) for r in rows)
    sent = {json.loads(r.body)["request_id"] for r in server.received}
    assert sent == {r["request_id"] for r in rows}
    assert all(
        r.path == "/endpoints/speech-ok/invocations-response-stream" for r in server.received
    )


def test_the_gates_503_in_a_model_error_is_a_rejection(
    server: EventStreamServer, tmp_path: Path
) -> None:
    server.scripts["speech-full"] = gate_full(max_queue_depth=8)
    rows = load(server, tmp_path, "--endpoint", "speech-full", "--rate", "3", "--duration", "1")
    assert len(rows) == 3
    assert {(r["status"], r["http_status"]) for r in rows} == {("rejected", 503)}
    assert all("queue_saturated" in str(r["error_code"]) for r in rows)
