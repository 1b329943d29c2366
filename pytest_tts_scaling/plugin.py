"""pytest hooks: options, markers, scenario selection, report extras and the session summary.

Cheap to import: numpy, pydantic, jinja2, jmespath, boto3, torch and matplotlib are imported inside
the functions that use them, so the plugin costs nothing in a project that does not use it
(tests/test_guards.py holds it).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Generator
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_tts_scaling import fixtures
from pytest_tts_scaling.core.spelling import UNPREFIXED, closest_flag
from pytest_tts_scaling.core.spelling import pytest_flag as tts_flag  # pytest_* names are hooks
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.failures import ShownOnce
from pytest_tts_scaling.option_table import OPTION_SPECS, add_to_pytest
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.stash import EXTRAS_KEY, OPTIONS_KEY, SHORT_NAMES_KEY, SUMMARY_KEY

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


GROUP = ("tts-scaling", "measured autoscaling for streaming TTS endpoints")
# The options that also answer to their bare names, in the table's order.
SHORT_NAMED = [spec for spec in OPTION_SPECS if spec.flag in UNPREFIXED]
# Files pytest reads its configuration from (and setup.py, which also makes a rootdir).
CONFIG_FILES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
    "setup.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_to_pytest(parser.getgroup(*GROUP))


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, object, object]:
    """After the project's conftests have added their options, before the command line is
    parsed: the short names where they are free, no path value that moved the rootdir, and a
    misspelled option of the plugin's named with the closest one."""
    result = yield
    early_config.stash[SHORT_NAMES_KEY] = add_short_names(parser)
    refuse_spaced_paths(early_config)
    refuse_misspelled(parser, args)
    return result


def refuse_misspelled(parser: pytest.Parser, args: list[str]) -> None:
    """A misspelled option of the plugin's names the closest one, as `tts-bench` does; pytest's
    own "unrecognized arguments" comes next, after every conftest has added its options."""
    _, unknown = parser.parse_known_and_unknown_args(args)
    ours = [tts_flag(spec.flag) for spec in OPTION_SPECS]
    for word in unknown:
        if word.startswith("-") and (close := closest_flag(word, ours)) is not None:
            raise pytest.UsageError(f"unrecognized arguments: {word}; did you mean {close}?")


def add_short_names(parser: pytest.Parser) -> tuple[str, ...]:
    """`--endpoint` and `--endpoint-url` beside `--tts-endpoint` and `--tts-endpoint-url`, each
    where no option of that name exists: a project's conftest may define its own, and its
    options are added after the plugin's. The names added."""
    group = parser.getgroup(*GROUP)
    added = []
    for spec in SHORT_NAMED:
        if is_taken(parser, spec.flag):
            continue
        keywords = spec.kwargs(tts_flag)
        keywords["help"] = (
            f"Short for {tts_flag(spec.flag)}, where the project has no {spec.flag} of its own."
        )
        group.addoption(spec.flag, **keywords)
        added.append(spec.flag)
    return tuple(added)


def is_taken(parser: pytest.Parser, flag: str) -> bool:
    """Whether an option of this name is already registered: pytest returns an unknown flag
    among the unknown ones, and refuses a known one that wants a value."""
    try:
        _, unknown = parser.parse_known_and_unknown_args([flag])
    except pytest.UsageError:
        return True
    return flag not in unknown


def refuse_spaced_paths(config: pytest.Config) -> None:
    """`--tts-baseline /path/q.json` with a space: pytest picks its rootdir and ini before any
    plugin's options are known, so it took the path as where to look for tests and configuration.
    Refused, naming the `=` form, wherever that moved them; a value that names no existing path,
    or one below where pytest would have looked anyway, changes nothing and is accepted."""
    flags = {tts_flag(spec.flag) for spec in OPTION_SPECS if spec.takes_value}
    args = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *config.invocation_params.args]
    here = config.invocation_params.dir
    start = lookup_start(config)
    for flag, value in pairwise(args):
        if flag in flags and moves_the_rootdir(here / value, start, here):
            raise pytest.UsageError(
                f"{flag} {value}: expected {flag}={value} (with '='): after a space pytest reads "
                "the path as where the tests are, and looks there for its rootdir and configuration"
            )


def lookup_start(config: pytest.Config) -> Path:
    """Where pytest starts looking for its configuration: the folder the paths on the command
    line share (the plugin's values after a space aside), else the current folder."""
    here = config.invocation_params.dir
    paths = (here / arg for arg in config.known_args_namespace.file_or_dir)
    folders = [path if path.is_dir() else path.parent for path in paths if path.exists()]
    return Path(os.path.commonpath(folders)) if folders else here


def moves_the_rootdir(path: Path, start: Path, here: Path) -> bool:
    """Whether pytest, looking from the folder `start` shares with an existing `path` rather than
    from `start`, finds another configuration file, or none and so another rootdir."""
    if not path.exists():
        return False
    folder, start, here = (
        absolute(p) for p in (path if path.is_dir() else path.parent, start, here)
    )
    shared = Path(os.path.commonpath([start, folder]))
    if has_config_below(start, shared) or has_config_below(folder, shared):
        return True
    if any(has_config(place) for place in (shared, *shared.parents)):
        return False
    return os.path.commonpath([here, shared]) != os.path.commonpath([here, start])


def has_config_below(folder: Path, top: Path) -> bool:
    """A configuration file in `folder` or a folder above it, below `top`."""
    return any(
        has_config(place)
        for place in (folder, *folder.parents)[: len(folder.relative_to(top).parts)]
    )


def absolute(path: Path) -> Path:
    """As pytest makes a path absolute: `..` folded, links kept."""
    return Path(os.path.abspath(path))


def has_config(folder: Path) -> bool:
    return any((folder / name).is_file() for name in CONFIG_FILES)


@pytest.hookimpl(tryfirst=True)  # before pytest-html's, which a dry run keeps from writing
def pytest_configure(config: pytest.Config) -> None:
    declared = project_markers(config)
    for name, description in STEP_MARKERS.items():
        if name not in declared:
            config.addinivalue_line("markers", f"{name}: {description}")
    values = {spec.dest: config.getoption(spec.dest) for spec in OPTION_SPECS}
    try:
        options = RunOptions.from_namespace(
            values, scenario_dirs=[config.rootpath / "scenarios", Path.cwd() / "scenarios"]
        )
        options.for_kind()
    except (argparse.ArgumentTypeError, InputError) as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[OPTIONS_KEY] = options
    config.stash[SUMMARY_KEY] = short_names_notice(config)
    narrow_to_the_steps_files(config)
    config.pluginmanager.register(fixtures, "tts_scaling_fixtures")
    if config.pluginmanager.hasplugin("html") and config.option.htmlpath and options.dry_run:
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
    return uses_the_plugin(item)


def uses_the_plugin(item: pytest.Item) -> bool:
    """A test that uses one of the plugin's `tts_` fixtures."""
    return any(name in fixtures.PUBLIC for name in getattr(item, "fixturenames", ()))


def selected_steps(config: pytest.Config) -> list[str]:
    """The steps `-m` asks for, when it names nothing but steps (`qmax`, `drift or plan`)."""
    expression = config.getoption("markexpr") or ""
    names = re.findall(r"[A-Za-z_]\w*", expression)
    if not names or "not" in names:
        return []
    steps = [name for name in names if name not in ("and", "or")]
    return steps if set(steps) <= STEP_MARKERS.keys() else []


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Before anything is measured: which short names are the project's own."""
    return [f"tts-scaling: {line}" for line in short_names_notice(config)]


def short_names_notice(config: pytest.Config) -> list[str]:
    """A run that names a step, in a project whose own options hold the short names: the line
    naming the plugin's."""
    ours = config.stash.get(SHORT_NAMES_KEY, ())
    theirs = [spec.flag for spec in SHORT_NAMED if spec.flag not in ours]
    if not theirs or not set(selected_steps(config)) - project_markers(config):
        return []
    return [
        f"{' and '.join(theirs)} are this project's own options: the plugin's are "
        f"{' and '.join(tts_flag(flag) for flag in theirs)}"
    ]


def narrow_to_the_steps_files(config: pytest.Config) -> None:
    """`pytest -m qmax` in a project with its own scenarios/test_qmax.py collects that file only,
    not the whole suite (this repository's 1,000 tests cost seconds before the probe starts).
    Paths given on the command line are collected as given."""
    steps = selected_steps(config)
    if config.args_source == pytest.Config.ArgsSource.ARGS or set(steps) & project_markers(config):
        return
    files = [config.rootpath / "scenarios" / f"test_{step}.py" for step in steps]
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
    """A session whose tests use the plugin's fixtures gets its session-wide hooks (one line per
    failure, the signal's exit status, the report's extras); one that will measure keeps an
    earlier HTML report aside. Any other session is not the plugin's to touch.

    pytest-html writes its report at the session's end, after this.
    """
    config = session.config
    if not any(uses_the_plugin(item) for item in session.items):
        return
    config.pluginmanager.register(SignalExit(), "tts_scaling_signal_exit")
    config.pluginmanager.register(ShownOnce(), "tts_scaling_shown_once")
    if not config.pluginmanager.hasplugin("html"):
        return
    config.pluginmanager.register(HtmlExtras(), "tts_scaling_html")
    if config.option.collectonly or not config.option.htmlpath:
        return
    if not any(is_measurement(item) for item in session.items):
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
    """pytest-html hooks, registered only when pytest-html is active in a session that measures."""

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
