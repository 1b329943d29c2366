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


def args() -> dict[str, str]:
    return dict(a.split("=", 1) for a in of("ARG"))


def test_one_cuda_the_torch_wheels_own() -> None:
    """The base image carries no CUDA: the torch wheel's libraries are the only copy."""
    (base,) = of("FROM")
    assert not base.startswith("nvidia/"), base
    runs = " ".join(of("RUN"))
    assert 'CUDA_TAG="cu$(echo "$CUDA_VERSION" | tr -d .)"' in runs
    assert "https://download.pytorch.org/whl/${CUDA_TAG}" in runs
    assert re.fullmatch(r"\d+\.\d+", args()["CUDA_VERSION"])


def test_runs_as_a_non_root_user() -> None:
    steps = instructions()
    users = [arguments for name, arguments in steps if name == "USER"]
    assert users, "no USER: the server would run as root"
    assert users[-1] not in {"root", "0"}
    last_user = max(i for i, (name, _) in enumerate(steps) if name == "USER")
    assert all(name != "RUN" for name, _ in steps[last_user:]), "RUN after USER runs as the user"
    runs = " ".join(of("RUN"))
    assert (
        f"useradd --system --uid 10001 --no-create-home --home-dir /opt/tts-cache {users[-1]}"
        in runs
    )
    # The one directory it writes is its own.
    assert "install -d -o tts -g tts /opt/tts-cache" in runs


def lock() -> dict[str, str]:
    """Package name -> pinned version (or URL) from requirements.lock."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for raw in (CONTAINER_DIR / "requirements.lock").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert req.url or (len(specs) == 1 and specs[0].operator == "=="), f"unpinned: {line}"
        pins[canonicalize_name(req.name)] = req.url or specs[0].version
    return pins


def test_every_dependency_is_pinned_in_the_lock() -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = lock()
    project = tomllib.loads((CONTAINER_DIR / "pyproject.toml").read_text())["project"]
    for raw in project["dependencies"]:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        if name == "torch":
            continue  # from PyTorch's CUDA index, pinned in the Dockerfile
        assert name in pins, f"{req.name} is not in requirements.lock"
        if not pins[name].startswith("https://"):
            assert req.specifier.contains(pins[name], prereleases=True), (raw, pins[name])
    assert "torch" not in pins
    assert pins["en-core-web-sm"].startswith("https://github.com/explosion/spacy-models/")


def test_every_pip_install_is_pinned() -> None:
    """torch by its exact version under the lock's constraints, everything else --no-deps."""
    for run in of("RUN"):
        for command in re.split(r"&&", run):
            words = shlex.split(command)
            if words[:2] != ["pip", "install"]:
                continue
            if '"torch==${TORCH_VERSION}"' in command or "torch==${TORCH_VERSION}" in words:
                assert words[words.index("-c") + 1] == "/opt/tts-container/requirements.lock"
            else:
                assert "--no-deps" in words, command
    assert "python -m spacy download" not in " ".join(of("RUN"))


def test_every_copy_source_exists() -> None:
    copies = of("COPY")
    assert copies
    for arguments in copies:
        words = [w for w in shlex.split(arguments) if not w.startswith("--")]
        assert not arguments.startswith("--from"), "no multi-stage copies expected"
        for source in words[:-1]:
            assert (CONTAINER_DIR / source).exists(), f"COPY source {source} is missing"


def test_torch_is_pinned_at_or_above_2_10() -> None:
    major, minor, _ = (int(part) for part in args()["TORCH_VERSION"].split("."))
    assert (major, minor) >= (2, 10)
    assert '"torch==${TORCH_VERSION}"' in " ".join(of("RUN"))


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
