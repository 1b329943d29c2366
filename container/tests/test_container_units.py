"""Pure parts of the container: settings, text splitting, audio bytes, markers, metrics, files."""

from __future__ import annotations

import io
import json
import re
import struct
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tts_container.audio import audio_seconds, pcm_content_type, to_pcm16, wav_header
from tts_container.engine import pick_precision
from tts_container.gate import InFlight
from tts_container.kokoro_batch import decode_in
from tts_container.markers import MARKERS, emit_marker, format_marker, parse_marker
from tts_container.metrics import RequestMetrics, emf_record
from tts_container.model_files import ModelFilesError, find_model_files, packaged_config
from tts_container.segmenter import split_segments
from tts_container.settings import Settings, SettingsError


class TestSettings:
    def test_defaults(self) -> None:
        settings = Settings.from_env({})
        assert settings.queue_max_depth == 0
        assert not settings.gate_enabled
        assert settings.max_text_chars == 5000
        assert settings.inference_workers is None  # auto
        assert settings.model_name == "kokoro-82m"
        assert settings.model_dir is None
        assert settings.device == "auto"
        assert settings.precision == "auto"
        assert settings.cache_dir == Path.home() / ".cache" / "tts-container"

    def test_reads_the_environment(self, tmp_path: Path) -> None:
        env = {
            "QUEUE_MAX_DEPTH": "50",
            "MAX_TEXT_CHARS": "100",
            "INFERENCE_WORKERS": "2",
            "MODEL_NAME": "kokoro-test",
            "MODEL_DIR": str(tmp_path),
            "DEVICE": "cpu",
            "FIRST_SEGMENT_WORDS": "4",
            "PRECISION": "bfloat16",
            "TTS_CACHE_DIR": str(tmp_path / "c"),
        }
        settings = Settings.from_env(env)
        assert (settings.queue_max_depth, settings.max_text_chars) == (50, 100)
        assert (settings.inference_workers, settings.first_segment_words) == (2, 4)
        assert (settings.model_name, settings.device) == ("kokoro-test", "cpu")
        assert settings.model_dir == tmp_path
        assert settings.cache_dir == tmp_path / "c"
        assert settings.precision == "bfloat16"
        assert settings.gate_enabled

    def test_inference_workers_auto(self) -> None:
        assert Settings.from_env({"INFERENCE_WORKERS": "auto"}).inference_workers is None
        assert Settings.from_env({"INFERENCE_WORKERS": "3"}).inference_workers == 3

    def test_overrides_win(self) -> None:
        assert Settings.from_env({"QUEUE_MAX_DEPTH": "5"}, queue_max_depth=2).queue_max_depth == 2

    @pytest.mark.parametrize(
        ("variable", "value", "message"),
        [
            ("QUEUE_MAX_DEPTH", "many", "QUEUE_MAX_DEPTH must be an integer, got 'many'"),
            ("QUEUE_MAX_DEPTH", "-1", "QUEUE_MAX_DEPTH must be >= 0"),
            ("INFERENCE_WORKERS", "0", "inference_workers must be auto or >= 1, got 0"),
            ("INFERENCE_WORKERS", "two", "INFERENCE_WORKERS must be auto or an integer, got 'two'"),
            ("DEVICE", "tpu", "device must be one of auto, cpu, cuda"),
            ("PRECISION", "half", "precision must be one of auto, float32, bfloat16, got 'half'"),
        ],
    )
    def test_bad_values_name_the_variable(self, variable: str, value: str, message: str) -> None:
        with pytest.raises(SettingsError, match=re.escape(message)):
            Settings.from_env({variable: value})


class TestPrecision:
    @pytest.mark.parametrize(
        ("flags", "device", "expected"),
        [
            ("fpu sse avx2 avx512f avx512_bf16 avx512_vnni", "cpu", "bfloat16"),
            ("fpu sse avx2 amx_bf16 amx_tile", "cpu", "bfloat16"),
            ("fpu sse avx2 avx512f", "cpu", "float32"),
            ("fpu sse avx2 avx512_bf16", "cuda", "float32"),
        ],
    )
    def test_auto_takes_bfloat16_where_the_cpu_has_it(
        self, tmp_path: Path, flags: str, device: str, expected: str
    ) -> None:
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n", encoding="utf-8")
        assert pick_precision("auto", device, cpuinfo) == expected

    def test_a_named_precision_wins_and_an_unreadable_cpuinfo_means_float32(
        self, tmp_path: Path
    ) -> None:
        missing = tmp_path / "absent"
        assert pick_precision("auto", "cpu", missing) == "float32"
        assert pick_precision("bfloat16", "cpu", missing) == "bfloat16"
        assert pick_precision("float32", "cpu", missing) == "float32"

    def test_the_decoder_computes_in_bfloat16_and_answers_float32(self) -> None:
        import torch

        seen: list[torch.dtype] = []

        class Decoder(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = torch.nn.Conv1d(2, 2, 3)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                out: torch.Tensor = self.conv(x)
                seen.append(out.dtype)
                return out

        model = SimpleNamespace(decoder=Decoder())
        x = torch.ones(1, 2, 8)
        decode_in(model, "float32")
        assert model.decoder(x).dtype == torch.float32
        decode_in(model, "bfloat16")
        decode_in(model, "bfloat16")  # once per model: a second call changes nothing
        answer = model.decoder(x)
        assert answer.dtype == torch.float32
        assert seen == [torch.float32, torch.bfloat16]
        assert not torch.is_autocast_enabled("cpu")  # the autocast ends with the forward


class TestSegments:
    def test_first_segment_ends_at_the_first_clause(self) -> None:
        assert split_segments("Hello there, this is a test. And another one!", 6) == [
            "Hello there,",
            "this is a test.",
            "And another one!",
        ]

    def test_first_segment_is_capped_in_words(self) -> None:
        text = "One two three four five six seven eight nine ten. Eleven twelve."
        assert split_segments(text, 4) == [
            "One two three four",
            "five six seven eight nine ten.",
            "Eleven twelve.",
        ]

    def test_long_sentences_are_cut_at_clauses_then_words(self) -> None:
        sentence = "alpha beta gamma, " * 10 + "delta " * 40
        segments = split_segments("Start. " + sentence, 6, max_chars=60)
        assert segments[0] == "Start."
        assert all(len(s) <= 60 for s in segments)
        assert segments[1].endswith(",")
        assert " ".join(segments).split() == ("Start. " + sentence).split()

    def test_newlines_and_blanks(self) -> None:
        assert split_segments("  \n\n hello world \n next line ") == ["hello world", "next line"]
        assert split_segments("   ") == []

    def test_a_word_longer_than_the_limit_is_cut(self) -> None:
        assert split_segments("x" * 25, 6, max_chars=10) == ["x" * 10, "x" * 10, "x" * 5]

    def test_a_text_within_the_first_segment_stays_whole(self) -> None:
        assert split_segments("Hello world, this is a test.", 6) == ["Hello world, this is a test."]
        assert split_segments("Hello world, this is a test!", 5) == [
            "Hello world,",
            "this is a test!",
        ]


class TestAudio:
    def test_float_samples_become_clipped_s16le(self) -> None:
        pcm = to_pcm16(np.array([0.0, 0.5, -1.0, 2.0, -3.0, np.nan], dtype=np.float32))
        assert np.frombuffer(pcm, "<i2").tolist() == [0, 16384, -32767, 32767, -32767, 0]

    def test_int16_passes_through(self) -> None:
        assert to_pcm16(np.array([1, -2], dtype=np.int16)) == struct.pack("<hh", 1, -2)

    def test_other_dtypes_are_refused(self) -> None:
        with pytest.raises(TypeError):
            to_pcm16(np.array([1, 2], dtype=np.int64))

    def test_wav_header_and_helpers(self) -> None:
        header = wav_header(24000)
        assert len(header) == 44
        fields = struct.unpack("<4sI4s4sIHHIIHH4sI", header)
        assert fields == (
            b"RIFF",
            0xFFFFFFFF,
            b"WAVE",
            b"fmt ",
            16,
            1,
            1,
            24000,
            48000,
            2,
            16,
            b"data",
            0xFFFFFFFF,
        )
        assert pcm_content_type(24000) == "audio/pcm;rate=24000;channels=1;encoding=s16le"
        assert audio_seconds(48000, 24000) == 1.0


class TestMarkers:
    LINE = re.compile(
        r'^TTS_MARKER \{"marker": "(\w+)", "at": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", '
        r'"elapsed_s": \d+\.\d+\}$'
    )

    def test_exact_format(self) -> None:
        moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
        assert format_marker("ready", moment, 12.5) == (
            'TTS_MARKER {"marker": "ready", "at": "2026-01-02T03:04:05.678901Z", "elapsed_s": 12.5}'
        )

    def test_emit_writes_one_flushed_line_that_parses_back(self) -> None:
        out = io.StringIO()
        line = emit_marker("container_started", out)
        assert out.getvalue() == line + "\n"
        assert self.LINE.match(line)
        marker = parse_marker("2026-01-01 INFO something " + line)
        assert marker is not None
        assert marker.name == "container_started"
        assert 0 <= marker.elapsed_s < 3600
        assert abs((datetime.now(UTC) - marker.at).total_seconds()) < 5

    def test_order_and_unknown_names(self) -> None:
        assert MARKERS == (
            "container_started",
            "framework_init",
            "weights_ready",
            "warmup_done",
            "ready",
        )
        with pytest.raises(ValueError, match="unknown marker"):
            format_marker("bogus", datetime.now(UTC), 0.0)
        assert parse_marker("no marker here") is None
        assert parse_marker("TTS_MARKER {broken") is None


class TestMetrics:
    def test_missing_values_are_left_out(self) -> None:
        record = emf_record(
            RequestMetrics("r", "http", "rejected", latency_s=0.0021, error="queue_saturated"),
            "kokoro-82m",
            timestamp_ms=1,
        )
        assert record["_aws"] == {
            "Timestamp": 1,
            "CloudWatchMetrics": [
                {
                    "Namespace": "TTS/Container",
                    "Dimensions": [["Model"]],
                    "Metrics": [{"Name": "Latency", "Unit": "Milliseconds"}],
                }
            ],
        }
        assert record["Latency"] == 2.1
        assert "FirstChunkLatency" not in record
        assert (record["status"], record["error"], record["Model"]) == (
            "rejected",
            "queue_saturated",
            "kokoro-82m",
        )
        json.dumps(record)


class TestInFlight:
    def test_bound_and_release(self) -> None:
        gate = InFlight(2)
        assert gate.try_acquire()
        assert gate.try_acquire()
        assert not gate.try_acquire()
        assert gate.saturated_body() == {
            "error": "queue_saturated",
            "queue_depth": 2,
            "max_queue_depth": 2,
        }
        gate.release()
        assert gate.try_acquire()

    def test_zero_is_unbounded(self) -> None:
        gate = InFlight(0)
        assert all(gate.try_acquire() for _ in range(1000))

    def test_release_without_acquire_is_a_bug(self) -> None:
        with pytest.raises(RuntimeError):
            InFlight(1).release()


class TestModelFiles:
    def make(self, root: Path, weights: int = 1, voices: bool = True, config: bool = True) -> Path:
        root.mkdir(parents=True)
        for index in range(weights):
            (root / f"kokoro-{index}.pth").write_bytes(b"")
        if voices:
            (root / "voices").mkdir()
            (root / "voices" / "af_heart.pt").write_bytes(b"")
            (root / "voices" / "am_adam.pt").write_bytes(b"")
        if config:
            (root / "config.json").write_text("{}")
        return root

    def test_finds_the_files(self, tmp_path: Path) -> None:
        files = find_model_files(self.make(tmp_path / "m"))
        assert files.weights.name == "kokoro-0.pth"
        assert sorted(files.voices) == ["af_heart", "am_adam"]
        assert files.config == tmp_path / "m" / "config.json"
        assert not files.untrained

    def test_missing_config_falls_back_to_the_packaged_one(self, tmp_path: Path) -> None:
        files = find_model_files(self.make(tmp_path / "m", config=False))
        assert files.config == packaged_config()
        assert json.loads(packaged_config().read_text())["plbert"]["hidden_size"] == 768

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"weights": 0}, r"exactly one \*\.pth"),
            ({"weights": 2}, "exactly one"),
            ({"voices": False}, "voice packs"),
        ],
    )
    def test_incomplete_directories_are_refused(
        self, tmp_path: Path, kwargs: dict[str, Any], message: str
    ) -> None:
        with pytest.raises(ModelFilesError, match=message):
            find_model_files(self.make(tmp_path / "m", **kwargs))

    def test_missing_directory(self, tmp_path: Path) -> None:
        with pytest.raises(ModelFilesError, match="does not exist"):
            find_model_files(tmp_path / "absent")


class TestCommandLine:
    def test_defaults_of_both_commands(self) -> None:
        from tts_container.cli import build_parser

        local = build_parser("tts-serve", "127.0.0.1").parse_args([])
        sagemaker = build_parser("serve", "0.0.0.0").parse_args([])
        assert (local.host, local.port, local.model_dir) == ("127.0.0.1", 8080, None)
        assert (sagemaker.host, sagemaker.port) == ("0.0.0.0", 8080)
        parsed = build_parser("tts-serve", "127.0.0.1").parse_args(
            ["--port", "9", "--model-dir", "/m"]
        )
        assert (parsed.port, parsed.model_dir) == (9, Path("/m"))

    def test_help_reads_like_documentation(self, capsys: pytest.CaptureFixture[str]) -> None:
        from tts_container.cli import main

        with pytest.raises(SystemExit) as exit_info:
            main(["--help"])
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        assert "QUEUE_MAX_DEPTH" in out
        assert "(default: 8080)" in out
        assert "TTS_MARKER" not in out

    def test_a_bad_environment_exits_2_naming_the_variable(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from tts_container.cli import main

        monkeypatch.setenv("QUEUE_MAX_DEPTH", "lots")
        assert main(["--port", "1"]) == 2
        assert "QUEUE_MAX_DEPTH must be an integer, got 'lots'" in capsys.readouterr().err
