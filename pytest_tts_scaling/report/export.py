"""CSV of an artifact for spreadsheets and other tools: one row per rung, request, stage or finding.

Nested fields become dotted columns (`ttfab_ms.p95`); lists are written as JSON text in one
cell. Per-request records are read from the JSONL files the qmax artifact names beside it and
joined with the request inputs (text, voice) by request id.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pytest_tts_scaling.artifacts import write_atomic
from pytest_tts_scaling.core.schema import PlanArtifact, QmaxArtifact, TtotalArtifact
from pytest_tts_scaling.errors import ArtifactError


@dataclass
class Exported:
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"ttfab_ms": {"p95": 1}}` → `{"ttfab_ms.p95": 1}`; lists become JSON text."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows as CSV; columns in the order they first appear, empty where a row lacks one. A field
    absent from one row (`audible_ms` None) and nested in another is only its dotted columns."""
    flat = [flatten(row) for row in rows]
    columns = list(dict.fromkeys(key for row in flat for key in row))
    nested = {c.split(".", 1)[0] for c in columns if "." in c}
    flat = [{k: v for k, v in row.items() if not (v is None and k in nested)} for row in flat]
    columns = [c for c in columns if c not in nested]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)
    return buffer.getvalue()


def _dumped(models: Iterable[BaseModel]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", by_alias=True) for m in models]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ArtifactError(f"{path}: line {number}: not JSON ({exc.msg})") from None
    return rows


def request_rows(
    artifact: QmaxArtifact, directory: Path
) -> tuple[list[dict[str, Any]], str | None]:
    """The per-request records beside a qmax artifact, with their inputs; or why there are none."""
    if not artifact.records_file:
        return [], "the artifact names no per-request records file"
    records_path = directory / artifact.records_file
    if not records_path.is_file():
        return [], f"per-request records {records_path} not found beside the artifact"
    inputs: dict[str, dict[str, Any]] = {}
    if artifact.inputs_file and (directory / artifact.inputs_file).is_file():
        inputs = {row["request_id"]: row for row in _jsonl(directory / artifact.inputs_file)}
    rows = []
    for record in _jsonl(records_path):
        given = inputs.get(record.get("request_id", ""), {})
        extra = {f"input.{k}": v for k, v in given.items() if k not in record}
        rows.append({**record, **extra})
    return rows, None


def export_csv(artifact: BaseModel, path: Path, directory: Path) -> Exported:
    """Write the artifact's tables as CSV files named after it into `directory`."""
    stem, done = path.stem, Exported()

    def write(kind: str, rows: list[dict[str, Any]]) -> None:
        target = directory / f"{stem}.{kind}.csv"
        write_atomic(target, to_csv(rows))
        done.written.append(target)

    if isinstance(artifact, QmaxArtifact):
        # `at_q_max` marks the Q_max rung: its throughput (rps, chars/s, audio s/s) is the answer's.
        rows = _dumped(artifact.rungs)
        for row, rung in zip(rows, artifact.rungs, strict=True):
            row["at_q_max"] = rung.concurrency == artifact.q_max
        write("rungs", rows)
        requests, why_not = request_rows(artifact, path.parent)
        if why_not is None:
            write("requests", requests)
        else:
            done.notes.append(f"no requests CSV: {why_not}")
    elif isinstance(artifact, TtotalArtifact):
        write("stages", _dumped(artifact.stages))
    elif isinstance(artifact, PlanArtifact):
        write("findings", _dumped(artifact.findings))
        if artifact.candidates:
            write("candidates", _dumped(artifact.candidates))
    return done
