"""Reading and writing artifacts: atomic writes, one-line errors naming the field."""

from __future__ import annotations

import functools
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from pytest_tts_scaling.core.schema import ARTIFACT_MODELS
from pytest_tts_scaling.errors import ArtifactError

M = TypeVar("M", bound=BaseModel)


def write_atomic(path: Path, text: str) -> None:
    """Write through a temp file in the same directory and rename it, so readers never see half.

    The temp file is created 0600; it gets the mode any new file would get (0666 less the umask),
    so an artifact is as readable as its siblings.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def current_umask() -> int:
    """The process umask, read once (reading it means setting it; it is put straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def dump_json(model: BaseModel) -> str:
    """The canonical text of an artifact: stable key order, so equal plans are equal bytes."""
    data = model.model_dump(mode="json", by_alias=True)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def save(model: BaseModel, path: Path) -> Path:
    write_atomic(path, dump_json(model))
    return path


def first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"]) or "(top level)"
    return f"field '{loc}': {err['msg'].lower()} (got {err.get('input')!r:.60})"


def _read_object(path: Path) -> dict[str, Any]:
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no such artifact file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise ArtifactError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    return raw


def _validate(path: Path, raw: dict[str, Any], model: type[M]) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ArtifactError(f"{path}: {first_error(exc)}") from None


def load(path: Path | str, model: type[M]) -> M:
    """Read an artifact of the given kind, or raise :class:`ArtifactError` in one line.

    The kind is the model's `schema` field default, so a model outside :data:`ARTIFACT_MODELS`
    (the freeze snapshot) reads the same way.
    """
    path = Path(path)
    raw = _read_object(path)
    expected = model.model_fields["schema_"].default
    # A model may read older versions of its kind too (the plan's schema 1): its Literal's values.
    readable = get_args(model.model_fields["schema_"].annotation) or (expected,)
    if raw.get("schema") not in readable:
        raise ArtifactError(
            f"{path}: field 'schema': expected {expected!r}, got {raw.get('schema')!r}"
        )
    return _validate(path, raw, model)


def load_any(path: Path | str) -> BaseModel:
    """Read an artifact of any kind, told apart by its schema field."""
    path = Path(path)
    raw = _read_object(path)
    model = ARTIFACT_MODELS.get(str(raw.get("schema")))
    if model is None:
        raise ArtifactError(
            f"{path}: field 'schema': expected one of {', '.join(ARTIFACT_MODELS)}, "
            f"got {raw.get('schema')!r}"
        )
    return _validate(path, raw, model)


def keep_previous(paths: list[Path]) -> list[tuple[Path, Path]]:
    """Move earlier outputs at these paths aside, so a new run never silently replaces them.

    Each existing file gets its modification time (UTC) before the suffix:
    `qmax-….json` → `qmax-….20261201T093600Z.json`. Returns the (old, kept-as) pairs so the
    caller can say what it moved.
    """
    moved: list[tuple[Path, Path]] = []
    for path in paths:
        if not path.exists():
            continue
        stamp = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y%m%dT%H%M%SZ")
        name, dot, suffix = path.name.partition(".")
        kept = path.with_name(f"{name}.{stamp}{dot}{suffix}")
        counter = 1
        while kept.exists():
            kept = path.with_name(f"{name}.{stamp}-{counter}{dot}{suffix}")
            counter += 1
        path.rename(kept)
        moved.append((path, kept))
    return moved


def write_keeping(path: Path, text: str) -> list[tuple[Path, Path]]:
    """`write_atomic`, moving an earlier, different file aside first (see :func:`keep_previous`).

    Writing the same bytes again is no collision: a reproduced plan stays where it is.
    """
    try:
        same = path.read_bytes() == text.encode("utf-8")
    except FileNotFoundError:
        same = False
    moved = [] if same else keep_previous([path])
    write_atomic(path, text)
    return moved


def save_keeping(model: BaseModel, path: Path) -> list[tuple[Path, Path]]:
    """Save an artifact without silently replacing a different earlier one; returns what moved."""
    return write_keeping(path, dump_json(model))


def kept_lines(moved: list[tuple[Path, Path]]) -> list[str]:
    """What a run tells its user about each earlier output it moved aside."""
    return [f"kept the earlier {old} as {kept.name}" for old, kept in moved]


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append per-request records; each line is a whole JSON object."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")
