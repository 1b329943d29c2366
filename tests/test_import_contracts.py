"""The layers in .importlinter hold, and `lint-imports` fails when one is broken.

The contracts run on the real package; then on a copy with one import planted that a contract
forbids, which must be reported with the chain that breaks it (a contract that cannot fail
guards nothing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(where: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(
            f"{LINT_IMPORTS} is missing: import-linter comes with the [dev] extra "
            "(make install, or pip install -e '.[dev]')",
            pytrace=False,
        )
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=where,
        env={**os.environ, "COLUMNS": "400"},  # one line per contract, however long its name
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_package_keeps_every_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        # The pure core reaching up to a step.
        ("core/stats.py", "from pytest_tts_scaling.steps import qmax", "Doors run steps"),
        # An adapter reaching up to a step.
        ("report/plots.py", "import pytest_tts_scaling.steps.plan", "Doors run steps"),
        # A lower adapter reaching sideways to a higher one.
        ("aws/clients.py", "from pytest_tts_scaling.fleet import localfleet", "Doors run steps"),
        # I/O in the pure core, even with every layer kept.
        ("core/curve.py", "import subprocess", "The pure core imports only itself"),
        # An adapter borrowing another's orchestration.
        ("report/plots.py", "from pytest_tts_scaling.aws.lifecycle import freeze", "orchestration"),
        # An adapter reading the doors' options instead of its own typed inputs.
        ("endpoints/factory.py", "from pytest_tts_scaling import options", "doors' options"),
        ("load/workload.py", "import pytest_tts_scaling.option_table", "doors' options"),
    ],
)
def test_a_planted_violation_breaks_its_contract(
    tmp_path: Path, module: str, planted: str, broken: str
) -> None:
    shutil.copytree(
        ROOT / "pytest_tts_scaling",
        tmp_path / "pytest_tts_scaling",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    target = tmp_path / "pytest_tts_scaling" / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{planted}  # planted\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    broken_lines = [line for line in done.stdout.splitlines() if " BROKEN" in line]
    assert any(broken in line for line in broken_lines), done.stdout[-3000:]
    assert "(l." in done.stdout  # the line that breaks it is named
