"""The documentation stands alone: everything README, docs/ and the code point a reader to exists.

- No tracked file refers to a specification outside the repository by its section numbers.
- Every relative link of README.md and docs/*.md reaches a file, and its anchor a heading there.
- Every `docs/PAGE.md#anchor` named in code, tests or errors is a page with that heading.
- Every page under docs/ is in mkdocs.yml's nav (`make docs` also fails on a page left out).
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
# Spelled in two pieces so this file does not match itself.
OUTSIDE_SPEC = "SPEC" + " §"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOCS_REFERENCE = re.compile(r"\bdocs/([a-z0-9][\w/-]*\.md)(?:#([\w-]+))?")


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        return None


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def anchors(page: Path) -> frozenset[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return frozenset(slug(h) for h in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.M))


def test_nothing_refers_to_an_outside_specification() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in tracked_files()
        if (text := text_of(path)) is not None and OUTSIDE_SPEC in text
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE_SPEC in line
    ]
    assert not found, f"say it in the project's words or name a docs/ page: {found}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_link_reaches_its_target(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor in {file.name}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_docs_page_the_code_names_exists() -> None:
    missing = []
    for path in tracked_files():
        if path.suffix != ".py" or (text := text_of(path)) is None:
            continue
        for name, anchor in DOCS_REFERENCE.findall(text):
            page = DOCS / name
            if not page.exists():
                missing.append(f"{path.relative_to(ROOT)}: docs/{name}")
            elif anchor and anchor not in anchors(page):
                missing.append(f"{path.relative_to(ROOT)}: docs/{name}#{anchor}")
    assert not missing


def nav_pages(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(nav_pages(item) for item in nav))
    if isinstance(nav, dict):
        return set().union(*(nav_pages(value) for value in nav.values()))
    return set()


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    pages = {str(page.relative_to(DOCS)) for page in PAGES}
    assert pages - listed == set(), "add these pages to mkdocs.yml's nav"
    assert listed - pages == set(), "the nav names pages that do not exist"


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A heading's anchor is what MkDocs makes of it, so a wrong anchor is caught."""
    assert slug("The client's clock") == "the-clients-clock"
    assert slug("WS /invocations-bidirectional-stream") == "ws-invocations-bidirectional-stream"
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n## Endpoint health\n\n```bash\n# not a heading\n```\n")
    assert anchors(page) == {"a-page", "endpoint-health"}
