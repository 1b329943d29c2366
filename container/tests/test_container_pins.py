"""uvicorn's private protocol modules, which protocol.py subclasses, at the pinned version: an
upgrade fails here, naming what to re-check, before a refusal loses its JSON body."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

UVICORN = "0.54.0"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_uvicorn_is_the_pinned_version_whose_protocols_are_subclassed() -> None:
    requirements = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert "uvicorn==" + UVICORN in requirements
    assert version("uvicorn") == UVICORN
    # What JsonErrorH11Protocol overrides or calls, and JsonErrorWebSocketProtocol replaces.
    for name in ("send_400_response", "data_received", "_unset_keepalive_if_required"):
        assert callable(getattr(H11Protocol, name, None)), name
    assert re.search(r"self\.conn = ServerProtocol\(", _source(WebSocketsSansIOProtocol))


def _source(cls: type) -> str:
    import inspect

    return inspect.getsource(cls)
