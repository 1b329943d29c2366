"""pytest hooks: options, markers, scenario selection, report extras and the session summary.

Cheap to import: numpy, pydantic, jinja2, jmespath, boto3, torch and matplotlib are imported inside
the functions that use them, so the plugin costs nothing in a project that does not use it
(tests/test_guards.py holds it).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Generator
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_tts_scaling import fixtures
from pytest_tts_scaling.core import spelling
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.failures import ShownOnce
from pytest_tts_scaling.option_table import OPTION_SPECS, add_to_pytest
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.stash import EXTRAS_KEY, OPTIONS_KEY, SUMMARY_KEY

if TYPE_CHECKING:
    from pytest_tts_scaling.report.extras import Shown

STEP_MARKERS = {
    "qmax": "Q_max: closed-loop concurrency search under a frozen endpoint.",
    "ttotal": "T_total: the scale-out timeline of one more instance.",
    "plan": "plan: thresholds, cooldowns and fleet size from the qmax and ttotal artifacts.",
    "drift": "drift: read-only preflight of the deployed scaling configuration.",
    "validate": "validate: the deployed scaling configuration matches the plan artifact.",
    "validate_live": "validate_live: opt-in checks of the policy under real load.",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    add_to_pytest(
        parser.getgroup("tts-scaling", "measured autoscaling for streaming TTS endpoints")
    )


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None]:
    """A misspelled option of the plugin's names the closest one, as `tts-bench` does; pytest's
    own "unrecognized arguments" comes next, after every conftest has added its options."""
    yield
    _, unknown = parser.parse_known_and_unknown_args(args)
    ours = [spelling.pytest_flag(spec.flag) for spec in OPTION_SPECS]
    for word in unknown:
        if word.startswith("-") and (close := spelling.closest_flag(word, ours)) is not None:
            raise pytest.UsageError(f"unrecognized arguments: {word}; did you mean {close}?")


@pytest.hookimpl(tryfirst=True)  # before pytest-html's, which a dry run keeps from writing
def pytest_configure(config: pytest.Config) -> None:
    for name, description in STEP_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    refuse_a_spaced_scenario_path(config.invocation_params.args)
    values = {spec.dest: config.getoption(spec.dest) for spec in OPTION_SPECS}
    try:
        options = RunOptions.from_namespace(
            values, scenario_dirs=[config.rootpath / "scenarios", Path.cwd() / "scenarios"]
        )
        options.for_kind()
    except (argparse.ArgumentTypeError, InputError) as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[OPTIONS_KEY] = options
    config.stash[SUMMARY_KEY] = []
    narrow_to_the_steps_files(config)
    config.pluginmanager.register(fixtures, "tts_scaling_fixtures")
    config.pluginmanager.register(SignalExit(), "tts_scaling_signal_exit")
    config.pluginmanager.register(ShownOnce(), "tts_scaling_shown_once")
    if config.pluginmanager.hasplugin("html"):
        config.pluginmanager.register(HtmlExtras(config), "tts_scaling_html")
        if config.option.htmlpath and options.dry_run:
            # A dry run measures nothing: its report would replace the last real one.
            config.stash[SUMMARY_KEY].append(
                f"html: dry run: no report written, {html_report_path(config)} left as it was"
            )
            config.option.htmlpath = None


def is_measurement(item: pytest.Item) -> bool:
    """A scenario of the plugin's: a step marker on a test that uses the plugin's `tts_` fixtures.

    A test of the user's that merely carries a marker of the same name (their own `validate`)
    is none of the plugin's business; a user's gate built on `tts_` fixtures measures like the
    packaged scenarios do.
    """
    if not any(any(item.iter_markers(name)) for name in STEP_MARKERS):
        return False
    return any(name in fixtures.PUBLIC for name in getattr(item, "fixturenames", ()))


def refuse_a_spaced_scenario_path(args: tuple[str, ...]) -> None:
    """`--tts-scenario /path/x.toml` with a space: pytest has already read the path as where to
    look for tests and its rootdir (plugin options are unknown when it decides), dropping the
    project's configuration. `--tts-scenario=/path/x.toml` is read as the option's value only;
    a NAME, or a file in the current folder, leaves the rootdir where it was."""
    for flag, value in pairwise(args):
        if flag == "--tts-scenario" and os.sep in value:
            raise pytest.UsageError(
                f"--tts-scenario {value}: expected --tts-scenario={value} (with '='): a path "
                "after a space is taken by pytest as the tests' location and rootdir"
            )


def selected_steps(config: pytest.Config) -> list[str]:
    """The steps `-m` asks for, when it names nothing but steps (`qmax`, `drift or plan`)."""
    expression = config.getoption("markexpr") or ""
    names = re.findall(r"[A-Za-z_]\w*", expression)
    if not names or "not" in names:
        return []
    steps = [name for name in names if name not in ("and", "or")]
    return steps if set(steps) <= STEP_MARKERS.keys() else []


def narrow_to_the_steps_files(config: pytest.Config) -> None:
    """`pytest -m qmax` in a project with its own scenarios/test_qmax.py collects that file only,
    not the whole suite (this repository's 1,000 tests cost seconds before the probe starts).
    Paths given on the command line are collected as given."""
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return
    files = [config.rootpath / "scenarios" / f"test_{step}.py" for step in selected_steps(config)]
    if files and all(path.is_file() for path in files):
        config.args = [str(path) for path in files]


def project_markers(config: pytest.Config) -> set[str]:
    """Markers the project declares itself (its ini's `markers`), not the plugin's lines."""
    ours = {f"{name}: {text}" for name, text in STEP_MARKERS.items()}
    lines = [line for line in config.getini("markers") if line not in ours]
    return {line.split(":")[0].split("(")[0].strip() for line in lines}


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection, which then applies to these
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """A step named with -m that the project has no scenario for runs the packaged one; without
    -m, measurement scenarios are left out: they need an endpoint."""
    if config.getoption("markexpr"):
        items.extend(packaged_scenarios(session, items))
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if is_measurement(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        config.stash[SUMMARY_KEY].append(
            f"{len(drop)} measurement scenario(s) left out: name a step to run them, "
            "e.g. pytest -m qmax"
        )


def packaged_scenarios(session: pytest.Session, items: list[pytest.Item]) -> list[pytest.Item]:
    """The packaged scenario of each selected step that nothing collected measures, so
    `pytest -m qmax --endpoint-url URL` runs in any project. A step whose marker the project
    declares itself is its own: nothing is added for it."""
    from pytest_tts_scaling.load.scenario import shipped_folder

    have = {
        name
        for item in items
        if is_measurement(item)
        for name in STEP_MARKERS
        if item.get_closest_marker(name)
    }
    missing = set(selected_steps(session.config)) - have - project_markers(session.config)
    added: list[pytest.Item] = []
    for step in sorted(missing):
        path = shipped_folder() / f"test_{step}.py"
        # Named as the package names it: the installed path lies outside the project's rootdir.
        nodeid = f"pytest_tts_scaling/scenarios/{path.name}"
        module = pytest.Module.from_parent(session, path=path, nodeid=nodeid)
        added.extend(session.genitems(module))
    return added


def pytest_collection_finish(session: pytest.Session) -> None:
    """A session that will measure keeps an earlier HTML report aside; any other leaves it be.

    pytest-html writes its report at the session's end, after this; a run that collects only,
    or selects none of the plugin's scenarios, is not the plugin's to touch.
    """
    config = session.config
    if not config.pluginmanager.hasplugin("html") or not config.option.htmlpath:
        return
    if config.option.collectonly or not any(is_measurement(item) for item in session.items):
        return
    from pytest_tts_scaling.artifacts import keep_previous, kept_lines

    moved = keep_previous([html_report_path(config)])
    config.stash[SUMMARY_KEY].extend(f"html: {line}" for line in kept_lines(moved))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """--export-csv: the tables of every artifact the session's tests showed, as CSV."""
    options = session.config.stash.get(OPTIONS_KEY, None)
    if options is None or options.export_csv is None:
        return
    from pytest_tts_scaling.report.export import export_csv

    summary = session.config.stash[SUMMARY_KEY]
    for shown in shown_artifacts(session):
        done = export_csv(shown.artifact, shown.path, options.export_csv)
        summary.extend(f"csv: {path}" for path in done.written)
        summary.extend(f"csv: {note}" for note in done.notes)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(SUMMARY_KEY, [])
    if lines:
        terminalreporter.section("tts-scaling")
        for line in lines:
            terminalreporter.write_line(line)


class SignalExit:
    """A run stopped by SIGTERM or SIGHUP (the freeze raises Terminated) exits 128 + the signal."""

    code: int | None = None

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.code = getattr(excinfo.value, "exit_code", None)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.code is not None:
            session.exitstatus = self.code


class HtmlExtras:
    """pytest-html hooks, registered only when pytest-html is active."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    # Innermost wrapper, so pytest-html's own wrapper sees the extras when it unwinds.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        extras = item.stash.get(EXTRAS_KEY, None)
        if extras is not None and report.when == "call":
            from pytest_html import extras as html_extras

            from pytest_tts_scaling.report.extras import render

            made = [
                html_extras.html(render("extra.html.j2", name=extra.name, content=extra.content))
                if extra.kind == "html"
                else getattr(html_extras, extra.kind)(extra.content, name=extra.name)
                for extra in extras.items
            ]
            made += [
                html_extras.url(shown.path.with_suffix(".html").name, name="page")
                for shown in extras.shown
            ]
            report.extras = [*getattr(report, "extras", []), *made]  # type: ignore[attr-defined]
        return report

    @pytest.hookimpl(trylast=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A module skipped while collecting (no Chromium, a missing extra) is a row of the
        report too: pytest-html lists only failed collections, so its count of skipped tests
        fell short of the terminal's."""
        if not report.skipped:
            return
        from pytest_html.basereport import BaseReport

        for plugin in self.config.pluginmanager.get_plugins():
            if isinstance(plugin, BaseReport):
                plugin._process_report(report, 0, [])

    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        """The answer on the first screen, and a self-contained page per artifact beside it."""
        shown = shown_artifacts(session)
        if not shown:
            return
        from pytest_tts_scaling.report.extras import render
        from pytest_tts_scaling.report.pages import view_for, write_page

        base = html_report_path(session.config).parent
        views = [view_for(s) for s in shown]
        for view in views:
            write_page(view, base / view.page)
        prefix.append(render("html_summary.html.j2", views=views, base=base, pages=True))


def html_report_path(config: pytest.Config) -> Path:
    """Where pytest-html writes the report: --html expanded as pytest-html expands it."""
    return Path(os.path.expandvars(config.option.htmlpath)).expanduser()


def shown_artifacts(session: pytest.Session) -> list[Shown]:
    """The artifacts this session's tests showed, once each (the last showing of a path wins)."""
    by_path: dict[Path, Shown] = {}
    for item in session.items:
        extras = item.stash.get(EXTRAS_KEY, None)
        for shown in extras.shown if extras is not None else ():
            by_path[shown.path.resolve()] = shown
    return list(by_path.values())
