from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_tts_scaling.artifacts import (
    dump_json,
    keep_previous,
    kept_lines,
    load,
    save,
    write_atomic,
    write_keeping,
)
from pytest_tts_scaling.core.schema import (
    QmaxArtifact,
    TtotalArtifact,
    qmax_filename,
    slug_for,
)
from pytest_tts_scaling.errors import ArtifactError
from tests.factories import make_qmax


def artifact() -> QmaxArtifact:
    return make_qmax(frozen=False)


def test_slug_and_names() -> None:
    assert slug_for("ml.g5.xlarge", "sha256:8b1b96bc0011") == "g5xlarge-8b1b96bc"
    assert qmax_filename("kokoro-82m", "bidi", "g5xlarge-8b1b96bc") == (
        "qmax-kokoro-82m-bidi-g5xlarge-8b1b96bc.json"
    )


def test_round_trip_keeps_unknown_fields(tmp_path: Path) -> None:
    path = save(artifact(), tmp_path / "a.json")
    raw = json.loads(path.read_text())
    assert raw["schema"] == "tts-scaling/qmax/1"
    raw["added_by_a_newer_tool"] = {"x": 1}
    path.write_text(json.dumps(raw))
    again = load(path, QmaxArtifact)
    assert json.loads(dump_json(again))["added_by_a_newer_tool"] == {"x": 1}


def test_atomic_write_leaves_old_file_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "a.json"
    target.write_text("old")

    def boom(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such artifact file"),
        ("{", "not JSON"),
        ("[]", "expected a JSON object"),
        ('{"schema": "tts-scaling/plan/1"}', "field 'schema': expected 'tts-scaling/qmax/1'"),
    ],
)
def test_load_errors_are_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "a.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ArtifactError, match=message) as info:
        load(path, QmaxArtifact)
    assert "\n" not in str(info.value)


def test_load_names_the_bad_field(tmp_path: Path) -> None:
    raw = json.loads(dump_json(artifact()))
    raw["slo_ms"] = "fast"
    del raw["rungs"]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ArtifactError, match="field 'slo_ms'"):
        load(path, QmaxArtifact)
    with pytest.raises(ArtifactError, match="expected 'tts-scaling/ttotal/1'"):
        load(path, TtotalArtifact)


def test_artifacts_get_the_mode_of_any_new_file(tmp_path: Path) -> None:
    sibling = tmp_path / "sibling.txt"
    sibling.write_text("x")
    target = tmp_path / "artifact.json"
    write_atomic(target, "{}")
    assert target.stat().st_mode & 0o777 == sibling.stat().st_mode & 0o777


def test_keep_previous_moves_earlier_outputs_aside(tmp_path: Path) -> None:
    artifact = tmp_path / "qmax-m-t-s.json"
    records = tmp_path / "qmax-m-t-s.requests.jsonl"
    artifact.write_text("first")
    records.write_text("rows")
    moved = keep_previous([artifact, records, tmp_path / "absent.json"])
    assert [old for old, _ in moved] == [artifact, records]
    kept_artifact, kept_records = (kept for _, kept in moved)
    assert kept_artifact.read_text() == "first"
    assert kept_records.name.endswith("Z.requests.jsonl")
    assert not artifact.exists()
    artifact.write_text("second")
    again = keep_previous([artifact])
    assert again[0][1] != kept_artifact
    assert again[0][1].read_text() == "second"


def test_write_keeping_moves_only_a_different_earlier_file(tmp_path: Path) -> None:
    path = tmp_path / "plan-m.json"
    assert write_keeping(path, "one\n") == []
    assert write_keeping(path, "one\n") == []  # the same bytes again: no collision
    assert [p.name for p in tmp_path.iterdir()] == ["plan-m.json"]
    [(old, kept)] = write_keeping(path, "two\n")
    assert (old, kept.read_text(), path.read_text()) == (path, "one\n", "two\n")
    assert kept_lines([(old, kept)]) == [f"kept the earlier {path} as {kept.name}"]
