"""Private APIs of third-party packages the plugin reads, each pinned to the version it was
written against: an upgrade fails here, naming what to re-check, before a load times wrong."""

from __future__ import annotations

import ast
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


def test_no_private_api_of_pytest_html_is_used() -> None:
    """pytest-html is not pinned (a user's report may come from any 4.x): the modules that use it
    import its public names only and reach for no private attribute of anything."""
    for path in sorted((ROOT / "pytest_tts_scaling").rglob("*.py")):
        tree = ast.parse(path.read_text())
        imported = [
            name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom | ast.Import)
            for name in (
                [node.module or "", *(a.name for a in node.names)]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
            )
        ]
        if not any(name.startswith("pytest_html") for name in imported):
            continue
        html_names = [n for n in imported if n.startswith("pytest_html") or n == "extras"]
        assert all(n in ("pytest_html", "extras") for n in html_names), (path, html_names)
        private = sorted(
            {
                node.attr
                for node in ast.walk(tree)
                if isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            }
        )
        assert private == [], (path, private)
