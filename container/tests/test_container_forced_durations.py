"""FORCE_DURATIONS without a model: the file's checks, the count of segments it lacks, the label,
the settings and the command line. The audio lengths it forces are in test_container_speech.py."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from container_fakes import AppFactory, running
from tts_container.cli import main as tts_serve
from tts_container.forced_durations import (
    FORMAT,
    ForcedDurations,
    ForcedDurationsError,
    segment_key,
)
from tts_container.settings import UNTRAINED_FORCED_LABEL, Settings, SettingsError

RECORDED = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "trained-durations.json"


def _data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": FORMAT,
        "weights": "trained (int8-derived v1.0)",
        "weights_sha256": "6e74",
        "voices": {"af_heart": "jm_kumo"},
        "segments": {segment_key("jm_kumo", 1.0, "hə"): [5, 2, 3, 7]},
    }
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"format": "other/2"}, "format must be 'trained-durations/1'"),
        ({"weights": ""}, "weights must be a non-empty string"),
        ({"weights_sha256": None}, "weights_sha256 must be a non-empty string"),
        ({"voices": {}}, "voices must be an object"),
        ({"voices": {"af_heart": 3}}, "voices['af_heart'] must be a voice name"),
        ({"segments": []}, "segments must be a non-empty object"),
        ({"segments": {"jm_kumo|hə": [1, 2, 3, 4]}}, "segments key 'jm_kumo|hə' must be"),
        ({"segments": {"jm_kumo|1|hə": [1, 0, 3, 4]}}, "whole frame counts >= 1"),
        ({"segments": {"jm_kumo|1|hə": [1, 2.5, 3, 4]}}, "whole frame counts >= 1"),
        ({"segments": {"jm_kumo|1|hə": [1, 2, 3]}}, "4 durations (one per phoneme"),
    ],
)
def test_a_bad_field_is_one_line_naming_it(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ForcedDurationsError) as caught:
        ForcedDurations.from_json(_data(**changes), "d.json")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("FORCE_DURATIONS: d.json: ")
    assert field in message, message


def test_a_missing_file_or_one_not_json_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ForcedDurationsError, match=r"^FORCE_DURATIONS: no file .*nowhere\.json$"):
        ForcedDurations.load(tmp_path / "nowhere.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ForcedDurationsError, match=r"broken\.json is not JSON: "):
        ForcedDurations.load(broken)


def test_a_segment_not_in_the_file_is_counted_and_named(caplog: pytest.LogCaptureFixture) -> None:
    forced = ForcedDurations.from_json(_data(), "d.json")
    assert forced.lookup("af_heart", 1.0, "hə") == [5, 2, 3, 7]
    caplog.set_level(logging.WARNING, logger="tts_container.forced_durations")
    assert forced.lookup("af_heart", 1.0, "ɑː") is None  # not recorded
    assert forced.lookup("af_heart", 1.0, "ɑː") is None  # the same again: counted, logged once
    assert forced.lookup("am_adam", 1.0, "hə") is None  # a voice the file does not map
    assert forced.lookup("af_heart", 1.2, "hə") is None  # another speed
    assert forced.headers() == {"X-TTS-Durations-Forced": "1", "X-TTS-Durations-Missed": "4"}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert all(word in lines[0] for word in ("not recorded", "'ɑː'", "af_heart")), lines[0]
    assert all(word in lines[1] for word in ("its voice is not in the file", "am_adam")), lines[1]
    assert "speed 1.2" in lines[2]


def test_the_recorded_file_loads_and_is_small() -> None:
    forced = ForcedDurations.load(RECORDED)
    assert forced.weights == "trained (int8-derived v1.0)"
    assert set(forced.voices) >= {"af_heart", "af_bella", "am_adam"}
    assert RECORDED.stat().st_size < 512 * 1024
    assert len(forced.segments) > 100


def test_forcing_is_for_the_untrained_model_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    settings = Settings.from_env({"WEIGHTS": "untrained", "FORCE_DURATIONS": str(path)})
    assert settings.force_durations == path
    assert settings.labels["weights"] == UNTRAINED_FORCED_LABEL
    with pytest.raises(SettingsError, match="force_durations is for the untrained model only"):
        Settings.from_env({"FORCE_DURATIONS": str(path)})
    with pytest.raises(SettingsError, match="engine=synthetic"):
        Settings(weights="untrained", engine="synthetic", force_durations=path)


def test_tts_serve_refuses_a_bad_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "d.json"
    bad.write_text(json.dumps(_data(voices=None)))
    code = tts_serve(["--weights", "untrained", "--force-durations", str(bad), "--port", "1"])
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("tts-serve: error: FORCE_DURATIONS: ")
    assert "voices must be an object" in error


def test_ping_counts_forced_and_missed_segments(make_app: AppFactory) -> None:
    app, engine, _ = make_app()
    engine.forced = ForcedDurations.from_json(_data(), "d.json")  # type: ignore[attr-defined]
    engine.forced.lookup("af_heart", 1.0, "ɑː")  # type: ignore[attr-defined]

    async def scenario() -> dict[str, str]:
        import httpx

        async with running(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                response = await client.get("/ping")
        assert response.status_code == 200
        return dict(response.headers)

    headers = asyncio.run(scenario())
    assert headers["x-tts-durations-missed"] == "1"
    assert headers["x-tts-durations-forced"] == "0"


def test_the_recorded_file_covers_every_segment_of_the_workload(dev_model_cache: Path) -> None:
    """Every text and voice the kokoro-82m workload can send (and the warm-up), segmented as the
    container segments them, is in the file: a change of G2P or segmenting that makes the file
    stale fails here (re-record with benchmarks/record_durations.py)."""
    from tts_container.app import WARMUP_TEXT
    from tts_container.engine import KokoroEngine
    from tts_container.request import SynthesisRequest

    from pytest_tts_scaling.load.scenario import load_scenario, resolve
    from pytest_tts_scaling.load.workload import Workload

    settings = Settings(
        cache_dir=dev_model_cache, weights="untrained", device="cpu", force_durations=RECORDED
    )
    engine = KokoroEngine.load(settings)
    forced = engine.forced
    assert forced is not None
    workload = Workload.from_scenario(load_scenario(resolve("kokoro-82m", [])), model="m")
    requests = [(WARMUP_TEXT, settings.default_voice)]
    requests += [(text, voice) for text in workload.texts for voice in workload.voices]
    for text, voice in requests:
        for piece in engine.pieces(SynthesisRequest(request_id="r", text=text, voice=voice)):
            forced.lookup(piece.voice, piece.speed, piece.phonemes)
    assert forced.missed == 0, forced.headers()
    assert forced.forced > len(workload.texts)
