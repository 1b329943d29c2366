"""The synthetic engine: its cost model, its labels, and fifo against edf on the real app."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from container_fakes import HttpResult, post, running
from tts_container.app import create_app
from tts_container.metrics import MetricsLog
from tts_container.request import SynthesisRequest
from tts_container.segmenter import split_segments
from tts_container.settings import Settings, SettingsError
from tts_container.synthetic import SyntheticEngine

# Four segments: a short first one, then one per sentence.
TEXT = "Hello there, friend of mine. This is the second one. And the last."
START_TIMEOUT_S = 60.0


def _engine(sleeps: list[float]) -> SyntheticEngine:
    return SyntheticEngine(
        batch_base_s=0.06, segment_s=0.07, segment_audio_s=2.0, sleep=sleeps.append
    )


class TestCostModel:
    def test_a_forward_of_b_segments_takes_base_plus_b_times_per_segment(self) -> None:
        sleeps: list[float] = []
        engine = _engine(sleeps)
        audio = engine.synthesize(["a", "b", "c"])
        assert sleeps == [pytest.approx(0.06 + 3 * 0.07)]
        assert [a.shape for a in audio] == [(48000,)] * 3
        assert audio[0].dtype == np.float32
        assert 0 < float(np.abs(audio[0]).max()) <= 0.1 + 1e-6

    def test_the_defaults_are_gpu_like_10_to_20_times_real_time_at_batch_1(self) -> None:
        engine = SyntheticEngine.from_settings(Settings())
        assert 10 <= engine.realtime_factor(1) <= 20
        assert engine.realtime_factor(8) > engine.realtime_factor(1)

    def test_segments_follow_the_real_engines_split(self) -> None:
        engine = _engine([])
        request = SynthesisRequest(request_id="s", text=TEXT)
        assert list(engine.pieces(request)) == split_segments(TEXT, 6, 300)
        assert len(list(engine.pieces(request))) == 4


class TestSettings:
    def test_scheduler_engine_and_batching_come_from_the_environment(self) -> None:
        settings = Settings.from_env(
            {
                "SCHEDULER": "edf",
                "ENGINE": "synthetic",
                "BATCH_MAX": "8",
                "BATCH_WAIT_MS": "5",
                "DEADLINE_MARGIN_MS": "100",
                "SYNTHETIC_SEGMENT_AUDIO_S": "1.5",
            }
        )
        assert (settings.scheduler, settings.engine, settings.batch_max) == ("edf", "synthetic", 8)
        assert (settings.batch_wait_ms, settings.deadline_margin_ms) == (5.0, 100.0)
        assert settings.synthetic_segment_audio_s == 1.5
        assert settings.labels == {
            "engine": "synthetic",
            "scheduler": "edf",
            "weights": "synthetic",
        }

    @pytest.mark.parametrize(
        ("variable", "value", "message"),
        [
            ("SCHEDULER", "lifo", "scheduler must be one of fifo, edf, got 'lifo'"),
            ("ENGINE", "fake", "engine must be one of auto, torch, onnx, synthetic, got 'fake'"),
            ("BATCH_MAX", "0", "batch_max must be >= 1"),
            ("BATCH_WAIT_MS", "soon", "BATCH_WAIT_MS must be a number, got 'soon'"),
            ("MAX_WAIT_MS", "-1", "MAX_WAIT_MS must be a finite number >= 0, got '-1'"),
            ("SYNTHETIC_SEGMENT_AUDIO_S", "0", "synthetic_segment_audio_s must be > 0"),
        ],
    )
    def test_bad_values_name_the_setting(self, variable: str, value: str, message: str) -> None:
        with pytest.raises(SettingsError, match=re.escape(message)):
            Settings.from_env({variable: value})


def _app(tmp_path: Path, scheduler: str) -> tuple[object, io.StringIO]:
    """The synthetic app; a small deadline margin, so playing streams can wait for newcomers."""
    metrics_out = io.StringIO()
    settings = Settings(
        cache_dir=tmp_path,
        engine="synthetic",
        scheduler=scheduler,
        deadline_margin_ms=250,
        synthetic_batch_base_ms=20,
        synthetic_segment_ms=30,
        synthetic_segment_audio_s=2.0,
    )
    metrics = MetricsLog("m", stream=metrics_out, labels=settings.labels)
    return create_app(settings, metrics=metrics), metrics_out


def _serve_five(tmp_path: Path, scheduler: str) -> tuple[list[HttpResult], list[dict[str, Any]]]:
    app, metrics_out = _app(tmp_path, scheduler)

    async def scenario() -> list[HttpResult]:
        async with running(app):  # type: ignore[arg-type]
            return await asyncio.gather(
                *(post(app, {"text": TEXT, "request_id": f"r{i}"}) for i in range(5))  # type: ignore[arg-type]
            )

    results = asyncio.run(scenario())
    lines = [json.loads(line) for line in metrics_out.getvalue().splitlines()]
    return results, lines


class TestOnTheApp:
    def test_fifo_runs_each_request_whole_before_the_next(self, tmp_path: Path) -> None:
        results, _ = _serve_five(tmp_path, "fifo")
        assert [r.status for r in results] == [200] * 5
        assert all(len(r.body) == 4 * 2 * 48000 for r in results)
        ordered = sorted(results, key=lambda r: r.chunk_times[0])
        for earlier, later in itertools.pairwise(ordered):
            assert earlier.chunk_times[-1] <= later.chunk_times[0]

    def test_edf_gives_every_request_its_first_audio_before_any_second_segment(
        self, tmp_path: Path
    ) -> None:
        results, lines = _serve_five(tmp_path, "edf")
        assert [r.status for r in results] == [200] * 5
        assert all(len(r.body) == 4 * 2 * 48000 for r in results)
        last_first = max(r.chunk_times[0] for r in results)
        first_second = min(r.chunk_times[1] for r in results)
        assert last_first < first_second
        # every later segment came before its player ran dry
        assert [line["DeadlineMisses"] for line in lines] == [0] * 5
        assert {(line["engine"], line["scheduler"]) for line in lines} == {("synthetic", "edf")}
        assert all(len(line["SegmentQueueWait"]) == 4 for line in lines)

    def test_ping_names_the_engine_and_the_scheduler(self, tmp_path: Path) -> None:
        app, _ = _app(tmp_path, "edf")

        async def scenario() -> httpx.Response:
            async with running(app):  # type: ignore[arg-type]
                transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
                async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                    return await client.get("/ping")

        response = asyncio.run(scenario())
        assert response.status_code == 200
        assert response.headers["x-tts-engine"] == "synthetic"
        assert response.headers["x-tts-scheduler"] == "edf"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_tts_serve_engine_synthetic_labels_every_log_line(tmp_path: Path) -> None:
    port = _free_port()
    stderr_path = tmp_path / "stderr.log"
    command = [sys.executable, "-m", "tts_container", "--port", str(port)]
    command += ["--engine", "synthetic", "--scheduler", "edf"]
    env = {**os.environ, "TTS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    with open(stderr_path, "wb") as err:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, stderr_path.read_text()
            assert time.monotonic() < deadline, "tts-serve --engine synthetic never got ready"
            try:
                ping = httpx.get(url + "/ping", timeout=2)
                if ping.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        assert ping.headers["x-tts-engine"] == "synthetic"
        assert ping.headers["x-tts-weights"] == "synthetic"
        response = httpx.post(url + "/invocations", json={"text": TEXT}, timeout=30)
        assert response.status_code == 200
        assert len(response.content) == 4 * int(2.0 * 48000)
    finally:
        process.terminate()
        try:
            stdout, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, _ = process.communicate(timeout=30)
            raise
    logged = [line for line in stderr_path.read_text().splitlines() if line.strip()]
    assert logged
    assert all(
        "[engine=synthetic weights=synthetic]" in line
        for line in logged
        if not line.startswith("#")
    )
    assert any("SYNTHETIC ENGINE" in line for line in logged)
    emf = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith('{"_aws"')]
    assert emf
    assert all(line["engine"] == "synthetic" for line in emf)
