"""What a regression check answers: one Check per compared value, and the Comparison of them.

The checks are made by :func:`pytest_tts_scaling.core.compare.compare_qmax`; this module holds
their outcome and its wording, the lines that ``tts-bench compare`` prints and the HTML report
shows. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

CheckStatus = Literal["ok", "improved", "regressed", "skipped"]
STATUS_LABEL: dict[str, str] = {
    "ok": "ok",
    "improved": "improved",
    "regressed": "REGRESSION",
    "skipped": "skipped",
}


@dataclass(frozen=True)
class Check:
    """One comparison: a value of the baseline, the new value and the bound it was held to."""

    name: str
    status: CheckStatus
    baseline: float | None
    new: float | None
    threshold: float | None
    detail: str
    concurrency: int | None = None
    unit: str = ""
    # How the new value must stand to the threshold: Q_max at or above, a latency at or below.
    relation: Literal[">=", "<="] = "<="

    @property
    def failed(self) -> bool:
        return self.status == "regressed"

    def line(self) -> str:
        label = STATUS_LABEL[self.status]
        if self.status == "skipped":
            return f"{label} {self.name}: {self.detail}"
        bound = (
            "threshold n/a"
            if self.threshold is None
            else f"threshold {self.relation} {self._value(self.threshold)}"
        )
        return (
            f"{label} {self.name}: baseline {self._value(self.baseline)}, "
            f"new {self._value(self.new)}, {bound} ({self.detail})"
        )

    def _value(self, value: float | None) -> str:
        if value is None:
            return "none"
        return f"{value:.1f} {self.unit}".strip() if self.unit else f"{value:g}"


@dataclass(frozen=True)
class Comparison:
    """Every check of one artifact against its baseline; it fails when any check regressed."""

    baseline_name: str
    new_name: str
    tolerance: float
    checks: tuple[Check, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # The one-sided z of the p95 TTFAB checks, and their threshold rule in words with its numbers
    # (both None when no rung was compared).
    z: float | None = None
    rule: str | None = None

    @property
    def regressions(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.failed)

    @property
    def ok(self) -> bool:
        return not self.regressions

    def verdict_line(self) -> str:
        compared = [c for c in self.checks if c.status != "skipped"]
        if self.ok:
            return (
                f"compare: no regression: {len(compared)} check(s) of {self.new_name} against "
                f"{self.baseline_name} (tolerance {self.tolerance:g})"
            )
        names = ", ".join(c.name for c in self.regressions)
        return (
            f"compare: REGRESSION in {len(self.regressions)} of {len(compared)} check(s) "
            f"({names}); to accept, commit {self.new_name} as the new baseline, or re-run with "
            f"a larger --regression-tolerance (now {self.tolerance:g})"
        )

    def lines(self) -> list[str]:
        return [
            *(f"compare: warning: {w}" for w in self.warnings),
            *([f"compare: {self.rule}"] if self.rule else []),
            *(c.line() for c in self.checks),
            self.verdict_line(),
        ]
