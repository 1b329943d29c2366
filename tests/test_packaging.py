"""The distribution lists every package it ships, and the data its packages read.

pyproject.toml names its packages one by one (the repository's top-level scenarios/ is mapped to
`pytest_tts_scaling.scenarios`, which `find` cannot see), so a new subpackage left off the list
would be missing from every install but an editable one. The built wheel itself is checked in
tests/test_wheel_install.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


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
