"""A contributor without an extra runs `pytest`: the modules that need it are skipped with the
command that installs it, and nothing errors while collecting (tests/without_extras.py takes
every extra's modules away)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECT = ("-p", "no:cacheprovider", "--collect-only", "-q", "-rs")
INSTALL = re.compile(r"\(pip install 'pytest-tts-scaling\[\w+\]'\)$")


def test_without_the_extras_every_module_that_needs_one_is_skipped_naming_its_install() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.without_extras", *COLLECT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    skips = re.findall(r"^SKIPPED \[\d+\] (\S+?):\d+: (.*)$", done.stdout, flags=re.M)
    skipped = {path for path, _ in skips}
    for module in (
        "tests/aws/test_aws_requests.py",
        "tests/test_records.py",
        "tests/test_fleet_load.py",
        "tests/test_report_glitches.py",
        "infra/tests/test_infra_weights_sync.py",
        "container/tests/conftest.py",
    ):
        assert module in skipped, module
    for path, reason in skips:
        if path.startswith("container/"):
            assert reason.endswith("(pip install -e './container[test]')"), (path, reason)
        else:
            assert re.search(r"\(pip install 'pytest-tts-scaling\[\w+\]'\)$", reason), (
                path,
                reason,
            )
