"""CI runs the validate_live rehearsal: `pytest -m validate_live` on the local fleet, in a
subprocess (the real scenario file, a measured plan, Locust in its own process).

About 100 s on a quiet 2-core machine; bounded at 6 minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKS = 6


def test_validate_live_rehearsal_passes_on_the_local_fleet(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_validate_live=(ROOT / "scenarios" / "test_validate_live.py").read_text()
    )
    result = pytester.runpytest_subprocess(
        "-m", "validate_live", "-p", "no:cacheprovider", "-v", timeout=360
    )
    result.assert_outcomes(passed=CHECKS)
    result.stdout.fnmatch_lines(
        [
            "*validate_live: plan Q_max *",
            "*validate_live: replaying * sends*",
            "*test_scale_in_only_after_its_cooldown PASSED*",
        ]
    )
    folder = pytester.path / "reports" / "validate-live"
    plan = json.loads((folder / "plan-calibration.json").read_text())
    assert plan["schema"] == "tts-scaling/plan/2"
    rows = (folder / "live.requests.jsonl").read_text().splitlines()
    assert len(rows) > 1000
    assert {"send_lag_ms", "due_epoch_ns", "ttfab_ms"} <= set(json.loads(rows[0]))
