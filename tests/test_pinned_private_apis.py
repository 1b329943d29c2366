"""Private APIs of third-party packages the plugin reads, each pinned to the version it was
written against: an upgrade fails here, naming what to re-check, before a load times wrong."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from pytest_tts_scaling.optional import needs_extra

ROOT = Path(__file__).resolve().parents[1]
GEVENTHTTPCLIENT = "2.6.1"


def pinned(name: str) -> str | None:
    """The pin in the project's dependencies or any extra's (geventhttpclient is [fleet]'s)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    found = [m.group(1) for r in requirements if (m := re.fullmatch(rf"{name}==(\S+)", r))]
    return found[0] if found else None


def test_geventhttpclient_is_the_pinned_version_whose_private_body_buffer_fleet_reads() -> None:
    """fleet/user.py's body_pieces reads `_body_buffer` and `_sock` of geventhttpclient's
    responses; on another version check that they still hold the parsed body and the socket."""
    response = pytest.importorskip(
        "geventhttpclient.response", reason=needs_extra("geventhttpclient")
    )

    assert pinned("geventhttpclient") == GEVENTHTTPCLIENT
    assert version("geventhttpclient") == GEVENTHTTPCLIENT
    source = inspect.getsource(response)
    assert "self._body_buffer" in source
    assert "self._sock" in source
    assert "message_complete" in source
    assert callable(getattr(response.HTTPSocketPoolResponse, "feed", None))
