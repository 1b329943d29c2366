"""What can be checked of the Dockerfile without a Docker engine."""

from __future__ import annotations

import importlib
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

CONTAINER_DIR = Path(__file__).resolve().parents[1]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined: list[str] = []
    pending = ""
    for raw in (CONTAINER_DIR / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    result = []
    for line in joined:
        keyword, _, arguments = line.partition(" ")
        result.append((keyword.upper(), arguments.strip()))
    return result


def of(keyword: str) -> list[str]:
    return [arguments for name, arguments in instructions() if name == keyword]


def test_label_for_bidirectional_streaming() -> None:
    labels = " ".join(of("LABEL"))
    assert "com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true" in labels


def test_exposes_8080() -> None:
    assert "8080" in " ".join(of("EXPOSE")).split()


def test_base_image_is_cuda() -> None:
    (base,) = of("FROM")
    assert base.startswith("nvidia/cuda:")
    assert "runtime" in base


def test_every_copy_source_exists() -> None:
    copies = of("COPY")
    assert copies
    for arguments in copies:
        words = [w for w in shlex.split(arguments) if not w.startswith("--")]
        assert not arguments.startswith("--from"), "no multi-stage copies expected"
        for source in words[:-1]:
            assert (CONTAINER_DIR / source).exists(), f"COPY source {source} is missing"


def test_torch_is_pinned_at_or_above_2_10() -> None:
    pins = re.findall(r"torch==(\d+)\.(\d+)\.(\d+)", " ".join(of("RUN")))
    assert pins, "the image must pin torch"
    assert all((int(major), int(minor)) >= (2, 10) for major, minor, _ in pins)


def test_the_command_is_the_declared_serve_entry_point() -> None:
    (command,) = of("CMD")
    assert json.loads(command) == ["serve"]
    assert not of("ENTRYPOINT"), "SageMaker passes `serve` as the command; no ENTRYPOINT"
    project = tomllib.loads((CONTAINER_DIR / "pyproject.toml").read_text())["project"]
    scripts = project["scripts"]
    assert project["name"] == "tts-container"
    for name in ("serve", "tts-serve"):
        module_name, _, function_name = scripts[name].partition(":")
        assert callable(getattr(importlib.import_module(module_name), function_name))
    assert scripts["serve"] != scripts["tts-serve"]  # same app, different default host


@pytest.mark.parametrize(
    "path", ["pyproject.toml", "tts_container/config.json", "tts_container/py.typed"]
)
def test_package_files_exist(path: str) -> None:
    assert (CONTAINER_DIR / path).is_file()
