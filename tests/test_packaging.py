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
    expected |= set(DATA_FOLDERS)
    assert expected <= listed, f"not in pyproject's packages: {sorted(expected - listed)}"
    data: dict[str, list[str]] = SETUPTOOLS["package-data"]
    for package in listed:
        folder = folder_of(package)
        # A folder of data files is a package without code: package-data names its files.
        assert (folder / "__init__.py").is_file() or package in data, package


# The folders of data files the code reads, each listed as a package with its files' glob (a
# folder left out of `packages` draws setuptools' "Package would be ignored" warning).
DATA_FOLDERS = {
    "pytest_tts_scaling.report.templates": "*.j2",
    "pytest_tts_scaling.scenarios.templates": "*.j2",
    "pytest_tts_scaling.scenarios.texts": "*.txt",
}


def package_data(package: str) -> set[Path]:
    data: dict[str, list[str]] = SETUPTOOLS["package-data"]
    folder = folder_of(package)
    return {p for glob in data.get(package, []) for p in folder.glob(glob)}


def test_package_data_globs_match_the_files_the_code_reads() -> None:
    scenarios = folder_of("pytest_tts_scaling.scenarios")
    assert set(scenarios.glob("*.toml")) <= package_data("pytest_tts_scaling.scenarios")
    assert folder_of("pytest_tts_scaling") / "py.typed" in package_data("pytest_tts_scaling")
    for package, glob in DATA_FOLDERS.items():
        files = {p for p in folder_of(package).iterdir() if p.is_file()}
        assert files, package
        assert files == set(folder_of(package).glob(glob)), f"{package}: only {glob} files"
        assert files <= package_data(package), package


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
