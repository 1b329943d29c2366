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
