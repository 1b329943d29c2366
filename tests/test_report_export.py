"""`tts-bench export ARTIFACT --csv DIR`: an artifact's rows as CSV for spreadsheets."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from pytest_tts_scaling.cli import main
from pytest_tts_scaling.report.export import flatten, to_csv

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "reports" / "examples" / "source"
QMAX = SOURCE / "qmax-kokoro-82m-response-stream-g5xlarge-8b1b96bc.json"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_nested_fields_become_dotted_columns_and_lists_json() -> None:
    assert flatten({"a": 1, "b": {"c": 2, "d": {"e": None}}, "g": [1.5, 2]}) == {
        "a": 1,
        "b.c": 2,
        "b.d.e": None,
        "g": "[1.5, 2]",
    }
    assert to_csv([{"a": 1}, {"b": "x,y"}]) == 'a,b\n1,\n,"x,y"\n'


def test_a_field_none_in_one_row_and_nested_in_another_is_its_dotted_columns() -> None:
    rows: list[dict[str, object]] = [
        {"n": 1, "audible_ms": None},
        {"n": 2, "audible_ms": {"p50": 3.0, "p95": 4.0}},
    ]
    assert to_csv(rows) == "n,audible_ms.p50,audible_ms.p95\n1,,\n2,3.0,4.0\n"


def test_export_of_the_source_qmax_writes_one_row_per_rung(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(QMAX), "--csv", str(tmp_path / "csv")]) == 0
    out = capsys.readouterr().out.splitlines()
    rungs_csv = tmp_path / "csv" / f"{QMAX.stem}.rungs.csv"
    assert out == [
        f"export: {rungs_csv}",
        "export: no requests CSV: the artifact names no per-request records file",
    ]
    artifact = json.loads(QMAX.read_text())
    rows = _rows(rungs_csv)
    assert [int(r["concurrency"]) for r in rows] == [r["concurrency"] for r in artifact["rungs"]]
    assert [float(r["ttfab_ms.p95"]) for r in rows] == [
        r["ttfab_ms"]["p95"] for r in artifact["rungs"]
    ]
    assert {"latency_ms.mean", "throughput_rps", "usable", "meets_slo"} <= set(rows[0])


def test_requests_are_joined_with_their_inputs(tmp_path: Path) -> None:
    artifact = json.loads(QMAX.read_text())
    artifact |= {"records_file": "r.jsonl", "inputs_file": "i.jsonl"}
    path = tmp_path / QMAX.name
    path.write_text(json.dumps(artifact))
    records = [
        {"request_id": "a", "rung": 1, "ttfab_ms": 61.0, "gaps_ms": [1.0, 2.5], "status": "ok"},
        {"request_id": "b", "rung": 1, "ttfab_ms": None, "gaps_ms": [], "status": "timeout"},
    ]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "i.jsonl").write_text(
        json.dumps({"request_id": "a", "rung": 1, "text": "Hello, world.", "voice": "af"}) + "\n"
    )
    assert main(["export", str(path), "--csv", str(tmp_path)]) == 0
    rows = _rows(tmp_path / f"{QMAX.stem}.requests.csv")
    assert [r["request_id"] for r in rows] == ["a", "b"]
    assert rows[0]["input.text"] == "Hello, world."
    assert rows[0]["input.voice"] == "af"
    assert "input.rung" not in rows[0]  # fields the record has already are not repeated
    assert json.loads(rows[0]["gaps_ms"]) == [1.0, 2.5]
    assert rows[1]["ttfab_ms"] == ""
    assert rows[1]["input.text"] == ""


def test_ttotal_and_plan_export_their_stages_and_findings(tmp_path: Path) -> None:
    for name, kind, count in (
        ("ttotal-kokoro-82m-forced-g5xlarge-8b1b96bc.json", "stages", "stages"),
        ("plan-kokoro-82m.json", "findings", "findings"),
    ):
        assert main(["export", str(SOURCE / name), "--csv", str(tmp_path)]) == 0
        rows = _rows(tmp_path / f"{Path(name).stem}.{kind}.csv")
        assert len(rows) == len(json.loads((SOURCE / name).read_text())[count])


def test_a_broken_records_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = Path(shutil.copy(QMAX, tmp_path / QMAX.name))
    data = json.loads(path.read_text()) | {"records_file": "r.jsonl"}
    path.write_text(json.dumps(data))
    (tmp_path / "r.jsonl").write_text('{"request_id": "a"}\n{not json\n')
    assert main(["export", str(path), "--csv", str(tmp_path / "out")]) == 2
    assert "r.jsonl: line 2: not JSON" in capsys.readouterr().err


def test_a_plan_that_weighed_instance_types_exports_its_candidates(tmp_path: Path) -> None:
    from pytest_tts_scaling.artifacts import save
    from tests.test_plan_candidates import cpu, gpu, weigh

    path = save(weigh(gpu(), cpu(0.2)).artifact, tmp_path / "plan-kokoro-82m.json")
    assert main(["export", str(path), "--csv", str(tmp_path / "csv")]) == 0
    rows = _rows(tmp_path / "csv" / "plan-kokoro-82m.candidates.csv")
    assert [(r["instance_type"], r["chosen"]) for r in rows] == [
        ("ml.g5.xlarge", "False"),
        ("ml.c5.xlarge", "True"),
    ]
    assert float(rows[1]["cost_per_day"]) < float(rows[0]["cost_per_day"])
