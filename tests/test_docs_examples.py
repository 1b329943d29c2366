"""Every shell block of README.md and docs/ runs as printed, so the documentation cannot drift.

Each ```bash block is one of three kinds, said by the HTML comment on the line before it:

- none: the block runs here, in bash with `set -euo pipefail`, from a copy of the repository root
  whose `reports/` holds only the committed examples, and must exit 0. `http://127.0.0.1:8080`, the
  documentation's local server, is a calibration server started for the page (four slots, 100 ms
  per request). The blocks of one page run in order in one such copy, so a later block reads what
  an earlier one wrote.
- `<!-- run-by: tests/PATH.py … -->`: another test runs the block's commands, reading them from the
  page (the walk-through against moto): that test must exist and name the page.
- `<!-- not-run: REASON -->`: the block cannot run offline (an AWS account, several hosts, a
  server that runs until stopped). Its `pytest` and `tts-bench` commands are still parsed by the
  real pytest and CLI, and the blocks left out are counted and listed (`-rA`, or the report).

Pages whose blocks hold load (ladders against the calibration server, Locust) are e2e.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer
from tests.test_examples_ci import Command, check_pytest, check_tts_bench, split_script

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LOCAL_URL = "http://127.0.0.1:8080"
SHELL = ("bash", "sh", "shell", "console")
# Commands that hold load for seconds (a ladder against the local server, Locust): their pages
# run only when e2e tests do.
SLOW = re.compile(
    r"^(?!.*--(tts-)?dry-run).*(--endpoint-url http://127\.0\.0\.1:8080|tts-bench load)", re.M
)
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
MARK = re.compile(r"<!--\s*(not-run|run-by):\s*(.*?)\s*-->\s*$")
# A block's commands get this long; a page's examples all together well under CI's 900 s.
TIMEOUT_S = 300


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    text: str
    kind: str  # "run", "not-run" or "run-by"
    note: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.match(before.strip())
        kind, note = (mark.group(1), mark.group(2)) if mark else ("run", "")
        line = text.count("\n", 0, match.start()) + 1
        out.append(Block(page, line, match.group(1), match.group(2), kind, note))
    return out


ALL = [block for page in PAGES for block in blocks_of(page)]
SHELL_BLOCKS = [b for b in ALL if b.language in SHELL]


def commands(block: Block) -> list[Command]:
    out = []
    for line in split_script(block.text):
        argv = shlex.split(re.sub(r"\s+#.*$", "", line))
        if argv and argv[0].startswith(".venv/bin/"):
            argv[0] = argv[0].removeprefix(".venv/bin/")
        out.append(Command(f"{block.where}: {line[:60]}", argv))
    return out


def test_every_block_is_tagged_and_every_shell_block_is_accounted_for() -> None:
    untagged = [b.where for b in ALL if not b.language]
    assert not untagged, f"tag these blocks with their language (bash, json, toml…): {untagged}"
    assert SHELL_BLOCKS, "no shell block found: the parser no longer reads the pages"
    for block in SHELL_BLOCKS:
        assert block.language == "bash", f"{block.where}: spell shell blocks ```bash"
        assert block.kind == "run" or block.note, f"{block.where}: say why it is {block.kind}"


def test_blocks_left_out_are_counted_and_listed(
    record_property: Callable[[str, object], None],
) -> None:
    left_out = [b for b in SHELL_BLOCKS if b.kind == "not-run"]
    listing = "\n".join(f"  {b.where}: {b.note}" for b in left_out)
    record_property("not_run", listing)
    print(f"{len(left_out)} of {len(SHELL_BLOCKS)} shell blocks do not run offline:\n{listing}")
    assert all(b.note for b in left_out), listing


@pytest.mark.parametrize(
    "block", [b for b in SHELL_BLOCKS if b.kind != "run"], ids=lambda b: b.where
)
def test_a_block_not_run_here_still_parses(block: Block, pytester: pytest.Pytester) -> None:
    if block.kind == "run-by":
        test = ROOT / block.note.split()[0].rstrip(",")
        assert test.is_file(), f"{block.where}: {test} does not exist"
        page = block.page.relative_to(ROOT).as_posix()
        assert page in test.read_text(encoding="utf-8"), f"{test.name} does not read {page}"
    for command in commands(block):
        if command.tool == "pytest" and "-m" in command.args:
            check_pytest(command, pytester)
        elif command.tool == "tts-bench":
            check_tts_bench(command)


def workspace(tmp_path: Path) -> Path:
    """The repository root as a reader has it, but with a `reports/` of the examples only."""
    root = tmp_path / "repo"
    root.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in {".git", ".venv", "reports", "site"} or entry.name.startswith("."):
            continue
        if entry.is_file():
            shutil.copy2(entry, root / entry.name)
        else:
            (root / entry.name).symlink_to(entry, target_is_directory=True)
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    shutil.copytree(ROOT / "reports" / "examples", root / "reports" / "examples")
    return root


def page_params() -> Iterator[object]:
    for page in PAGES:
        runnable = [b for b in blocks_of(page) if b.language in SHELL and b.kind == "run"]
        if runnable:
            slow = any(SLOW.search(b.text) for b in runnable)
            marks = [pytest.mark.e2e] if slow else []
            yield pytest.param(page, marks=marks, id=str(page.relative_to(ROOT)))


@pytest.mark.parametrize("page", list(page_params()))
def test_the_page_runs_as_printed(page: Path, tmp_path: Path) -> None:
    runnable = [b for b in blocks_of(page) if b.language in SHELL and b.kind == "run"]
    root = workspace(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PYTEST_ADDOPTS", None)
    with SerialStreamServer(slots=4, service_s=0.1, first_audio_s=0.05) as server:
        for block in runnable:
            script = block.text.replace(LOCAL_URL, server.base_url)
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
            assert result.returncode == 0, (
                f"{block.where} exited {result.returncode}:\n{block.text}\n"
                f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
            )
