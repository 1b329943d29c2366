"""The distributions: the plugin lists every package it ships and the data its packages read;
the container (`tts-container`) and the CDK app (`speech-infra`) build beside it, pass
`twine check`, and the plugin's extras name the container at the version released with it.

pyproject.toml names its packages one by one (the repository's top-level scenarios/ is mapped to
`pytest_tts_scaling.scenarios`, which `find` cannot see), so a new subpackage left off the list
would be missing from every install but an editable one. The plugin's built wheel itself is
checked in tests/test_wheel_install.py.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PROJECT["tool"]["setuptools"]


def folder_of(package: str) -> Path:
    """Where setuptools takes a package from: its package-dir mapping, else its dotted path."""
    mapping: dict[str, str] = SETUPTOOLS.get("package-dir", {})
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in mapping:
            return ROOT / mapping[head] / Path(*parts[cut:])
    return ROOT / Path(*parts)


def test_every_package_folder_is_listed() -> None:
    listed = set(SETUPTOOLS["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT / "pytest_tts_scaling").parts)
        for init in (ROOT / "pytest_tts_scaling").rglob("__init__.py")
    }
    expected = {"pytest_tts_scaling" + (f".{p}" if p else "") for p in on_disk}
    expected.add("pytest_tts_scaling.scenarios")
    assert expected <= listed, f"not in pyproject's packages: {sorted(expected - listed)}"
    for package in listed:
        assert (folder_of(package) / "__init__.py").is_file(), package


def test_package_data_globs_match_the_files_the_code_reads() -> None:
    data: dict[str, list[str]] = SETUPTOOLS["package-data"]
    scenarios = folder_of("pytest_tts_scaling.scenarios")
    matched = {p for glob in data["pytest_tts_scaling.scenarios"] for p in scenarios.glob(glob)}
    needed = {*scenarios.glob("*.toml"), *scenarios.glob("templates/*"), *scenarios.glob("texts/*")}
    assert needed
    assert needed <= matched
    plugin = folder_of("pytest_tts_scaling")
    matched = {p for glob in data["pytest_tts_scaling"] for p in plugin.glob(glob)}
    assert plugin / "py.typed" in matched
    assert set((plugin / "report" / "templates").glob("*.j2")) <= matched


def test_the_local_extra_names_the_container_released_with_the_plugin() -> None:
    """An index resolves `[local]` and `[all]` to the container of the plugin's own version."""
    container = tomllib.loads((ROOT / "container" / "pyproject.toml").read_text())["project"]
    version = PROJECT["project"]["version"]
    assert container["name"] == "tts-container"
    assert container["version"] == version
    extras = PROJECT["project"]["optional-dependencies"]
    assert extras["local"] == [f"tts-container[model]=={version}"]
    assert "local" in extras["all"][0]


@pytest.mark.parametrize(
    ("folder", "files"),
    [
        ("container", {"tts_container/config.json", "tts_container/py.typed"}),
        ("infra", {"speech_infra/plan_gate.py", "speech_infra/handlers/__init__.py"}),
    ],
)
def test_the_container_and_the_cdk_app_build_and_pass_twine_check(
    folder: str, files: set[str], tmp_path: Path
) -> None:
    """The sdist, and the wheel built from it (as `python -m build` does), with the package data
    their code reads; `twine check --strict` accepts both (a readme, its content type)."""
    build = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path)]
    run(*build, str(ROOT / folder))
    run(sys.executable, "-m", "twine", "check", "--strict", *map(str, tmp_path.iterdir()))
    [wheel] = tmp_path.glob("*.whl")
    assert files <= set(zipfile.ZipFile(wheel).namelist())
    assert len(list(tmp_path.glob("*.tar.gz"))) == 1


def run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
