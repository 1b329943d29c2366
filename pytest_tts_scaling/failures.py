"""One line per failure under pytest, in the words `tts-bench` prints.

A step that cannot go on raises a `ToolError` whose message is already the one line a user needs
(a dead endpoint, a refused input, a missing artifact). Under pytest that line must not arrive
wrapped in the plugin's traceback, nor once per scenario: a session fixture that fails is re-raised
for every test that uses it, so the first test shows the line and the rest say "see above".
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest

from pytest_tts_scaling.errors import ToolError
from pytest_tts_scaling.optional import missing_extra


class InconclusiveWarning(UserWarning):
    """An answer that passed while the p95 interval it rests on still holds the SLO: not a
    failure (unless --fail-on-inconclusive), and not a plain green either."""


class StepFailed(pytest.fail.Exception):  # type: ignore[name-defined]
    """A step's one-line failure: the only failures :class:`ShownOnce` rewrites, so a project's
    own `pytest.fail(..., pytrace=False)` reads as pytest writes it."""


def fail(step: str, message: str, summary: list[str]) -> NoReturn:
    """End the test with `step: message` and no traceback; the line joins the run's summary."""
    line = f"{step}: {message}"
    summary.append(line)
    raise StepFailed(line, pytrace=False)


@contextmanager
def one_line(step: str, summary: list[str], what: str = "error") -> Iterator[None]:
    """A `ToolError` inside ends the test as `tts-bench STEP` would end: `STEP: error: ...`."""
    try:
        yield
    except ToolError as exc:
        message = f"{what}: {exc}"
    except ModuleNotFoundError as exc:
        if (missing := missing_extra(exc)) is None:
            raise
        message = f"{what}: {missing}"
    else:
        return
    fail(step, message, summary)  # outside the handler: no chained traceback


class ShownOnce:
    """pytest hooks, registered in a session that measures: a step's one-line failure re-raised
    for a later test (a cached session fixture) reads "see above" with the first test's name, not
    the line again."""

    def __init__(self) -> None:
        self.first: list[tuple[BaseException, str]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        exc = call.excinfo.value if call.excinfo is not None else None
        if isinstance(exc, StepFailed) and report.failed:
            seen = next((name for e, name in self.first if e is exc), None)
            if seen is None:
                self.first.append((exc, item.nodeid))
                report.longrepr = str(exc)  # the line alone, without pytest's "Failed: "
            else:
                report.longrepr = f"not run: see the failure of {seen} above"
        return report
