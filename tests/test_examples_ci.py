"""The CI recipes in examples/ci/: valid YAML, the right triggers and credentials, and every
`pytest`/`tts-bench` command they run is one this project accepts.

Each `pytest` command is parsed by pytest itself (`--collect-only` against the real scenarios, so
an unknown option or a bad value is a usage error) and must select at least one scenario; its
`-m` expression may name only step markers. Each `tts-bench` command is parsed by the real CLI.
GitHub expressions (`${{ vars.X }}`) stand for values set in CI and are replaced by samples.
"""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_tts_scaling.cli import COMMANDS, build_parser
from pytest_tts_scaling.core.spelling import UNPREFIXED, pytest_flag
from pytest_tts_scaling.option_table import OPTION_SPECS
from pytest_tts_scaling.plugin import STEP_MARKERS

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "examples" / "ci"
WORKFLOWS = ("promotion.yml", "nightly.yml")
# Values a workflow leaves to CI variables, by the option they are given to.
SAMPLES = {"--endpoint": "speech-kokoro-82m", "--tts-peak-rps": "5000", "--tts-trough-rps": "10"}
UNSET = "<set-in-ci>"
PLUGIN_FLAGS = {pytest_flag(spec.flag) for spec in OPTION_SPECS} | set(UNPREFIXED)


@dataclass(frozen=True)
class Command:
    where: str
    argv: list[str]

    @property
    def tool(self) -> str | None:
        head = self.argv[:3]
        if head[:1] == ["pytest"] or head[1:3] == ["-m", "pytest"]:
            return "pytest"
        if head[:1] == ["tts-bench"]:
            return "tts-bench"
        return None

    @property
    def args(self) -> list[str]:
        return self.argv[1:] if self.argv[0] in ("pytest", "tts-bench") else self.argv[3:]


def workflow(name: str) -> dict[Any, Any]:
    data = yaml.safe_load((CI / name).read_text())
    assert isinstance(data, dict)
    # YAML 1.1 reads the key `on` as True.
    data["on"] = data.pop(True, data.get("on"))
    return data


def expand(text: str, env: Mapping[str, str]) -> str:
    """`${{ … }}` → UNSET; `$NAME`/`${NAME}` → its env value (itself expanded) or UNSET."""
    text = re.sub(r"\$\{\{[^}]*\}\}", UNSET, text)

    def var(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return expand(env[name], env) if name in env else UNSET

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", var, text)


def split_script(script: str) -> Iterator[str]:
    for line in script.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;|\|", line):
            if part.strip() and not part.strip().startswith("#"):
                yield part.strip()


def commands_of(name: str) -> list[Command]:
    data = workflow(name)
    out = []
    for job_name, job in data["jobs"].items():
        for index, step in enumerate(job.get("steps", [])):
            if "run" not in step:
                continue
            env = {**data.get("env", {}), **job.get("env", {}), **step.get("env", {})}
            for text in split_script(step["run"]):
                argv = shlex.split(expand(text, {k: str(v) for k, v in env.items()}))
                out.append(Command(f"{name}: job {job_name}, step {index + 1}", argv))
    return out


def page_commands(page: Path) -> list[Command]:
    """Commands in a page's bash blocks (line continuations joined)."""
    text = page.read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in split_script(block):
            line = re.sub(r"\s+#.*$", "", line)
            argv = shlex.split(expand(line, {}))
            if argv and argv[0].startswith(".venv/bin/"):
                argv[0] = argv[0].removeprefix(".venv/bin/")
            out.append(Command(f"{page.name}: {line[:60]}", argv))
    return out


def with_samples(args: list[str]) -> list[str]:
    """Replace values left to CI by a valid sample for their option."""
    out: list[str] = []
    for arg in args:
        if UNSET in arg:
            flag = out[-1] if out else ""
            assert flag in SAMPLES, f"no sample value for {flag} (add one to SAMPLES)"
            arg = SAMPLES[flag]
        out.append(arg)
    return out


def markers_in(args: list[str]) -> set[str]:
    names: set[str] = set()
    for flag, value in itertools.pairwise(args):
        if flag == "-m":
            names |= set(re.findall(r"[A-Za-z_]\w*", value)) - {"and", "or", "not"}
    return names


def check_pytest(command: Command, pytester: pytest.Pytester) -> int:
    """Parse the command with pytest against the real scenarios; return how many it selects."""
    args = with_samples(command.args)
    unknown = markers_in(args) - set(STEP_MARKERS)
    assert not unknown, f"{command.where}: -m names {unknown}, not step markers"
    assert "-m" in args, f"{command.where}: a scenario run names its step with -m"
    # The test's folder stands for the repository's root: the repository's paths the command
    # names (scenarios/, committed artifacts) are copied there and the command runs as written.
    # A command that names none collects from the root, where testpaths include scenarios/.
    named = [arg for arg in args if not arg.startswith("-") and (ROOT / arg).exists()]
    if not named:
        named = ["scenarios"]
        args = [*args, "scenarios"]
    for arg in named:
        if not (pytester.path / arg).exists():
            copy = shutil.copytree if (ROOT / arg).is_dir() else shutil.copy
            (pytester.path / arg).parent.mkdir(parents=True, exist_ok=True)
            copy(ROOT / arg, pytester.path / arg)
    # In a process of its own: this session may have imported the repository's scenarios under
    # the same module names, and pytest refuses a second file of one name ("import file mismatch").
    result = pytester.runpytest_subprocess(*args, "--collect-only", "-q", "-p", "no:cacheprovider")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, f"{command.where}: pytest refused {args}:\n{output}"
    selected = [line for line in result.stdout.lines if "::" in line]
    assert selected, f"{command.where}: {args} selects no scenario"
    return len(selected)


def check_tts_bench(command: Command) -> str:
    args = with_samples(command.args)
    assert args, f"{command.where}: tts-bench without a command"
    assert args[0].replace("-", "_") in COMMANDS, (
        f"{command.where}: {args[0]} is not a tts-bench command"
    )
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as exc:
        raise AssertionError(f"{command.where}: tts-bench refused {args}") from exc
    assert parsed.command == args[0]
    return str(args[0])


@pytest.fixture
def at_root_scenarios(pytester: pytest.Pytester) -> pytest.Pytester:
    # Outputs named by the commands (--junitxml, --html) land in pytester's directory.
    return pytester


@pytest.mark.parametrize("name", WORKFLOWS)
def test_workflow_commands_exist(name: str, at_root_scenarios: pytest.Pytester) -> None:
    commands = [c for c in commands_of(name) if c.tool]
    assert commands, f"{name} runs no pytest or tts-bench command"
    for command in commands:
        if command.tool == "pytest":
            check_pytest(command, at_root_scenarios)
        else:
            check_tts_bench(command)
    for command in commands_of(name):
        if command.argv[:2] == ["pip", "install"] and "-c" in command.argv:
            assert (ROOT / command.argv[command.argv.index("-c") + 1]).exists()


def test_ci_page_commands_exist(at_root_scenarios: pytest.Pytester) -> None:
    commands = [c for c in page_commands(ROOT / "docs" / "ci.md") if c.tool]
    gates = [c for c in commands if c.tool == "pytest" and markers_in(c.args) & {"drift"}]
    assert any({"drift", "plan", "validate"} <= markers_in(c.args) for c in gates)
    assert any("--tts-baseline" in c.args for c in commands if c.tool == "pytest")
    for command in commands:
        if command.tool == "pytest" and "-m" in command.args:
            check_pytest(command, at_root_scenarios)
        elif command.tool == "tts-bench":
            check_tts_bench(command)


def aws_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        s for s in job["steps"] if str(s.get("uses", "")).startswith("aws-actions/configure-aws")
    ]


@pytest.mark.parametrize("name", WORKFLOWS)
def test_aws_credentials_come_from_an_oidc_role(name: str) -> None:
    data = workflow(name)
    assert data["permissions"]["id-token"] == "write"
    for job_name, job in data["jobs"].items():
        runs = [c for c in commands_of(name) if c.where.startswith(f"{name}: job {job_name},")]
        if not any(c.tool for c in runs):
            continue
        [step] = aws_steps(job)
        assert "role-to-assume" in step["with"], f"{name}: job {job_name}"
        assert "aws-access-key-id" not in step["with"]
    assert "aws-access-key-id" not in (CI / name).read_text()
    assert "AWS_SECRET_ACCESS_KEY" not in (CI / name).read_text()


def test_promotion_runs_on_tags_drift_then_validate() -> None:
    data = workflow("promotion.yml")
    assert data["on"]["push"]["tags"]
    by_job: dict[str, set[str]] = {}
    for command in commands_of("promotion.yml"):
        if command.tool == "pytest":
            job = command.where.split("job ")[1].split(",")[0]
            by_job.setdefault(job, set()).update(markers_in(command.args))
    assert by_job == {"drift": {"drift"}, "validate": {"plan", "validate"}}
    assert data["jobs"]["validate"]["needs"] == "drift"
    # Each step publishes its JUnit XML, where each check is a test case.
    for job in ("drift", "validate"):
        [run] = [
            c
            for c in commands_of("promotion.yml")
            if c.where.startswith(f"promotion.yml: job {job},") and c.tool
        ]
        assert any(a.startswith("--junitxml") for a in run.args)


def test_nightly_measures_against_the_baseline_and_uploads_the_report() -> None:
    data = workflow("nightly.yml")
    assert data["on"]["schedule"][0]["cron"]
    [job] = data["jobs"].values()
    [run] = [c for c in commands_of("nightly.yml") if c.tool == "pytest"]
    assert markers_in(run.args) == {"qmax"}
    for flag in ("--tts-baseline", "--endpoint", "--html", "--tts-artifacts-dir"):
        assert flag in run.args, flag
    reports = Path(run.args[run.args.index("--tts-artifacts-dir") + 1])
    html = Path(run.args[run.args.index("--html") + 1])
    [upload] = [
        s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")
    ]
    assert upload["if"] == "always()"
    uploaded = Path(upload["with"]["path"])
    assert reports.is_relative_to(uploaded)
    assert html.is_relative_to(uploaded)
    # The baseline is not in the directory the new artifact is written to.
    baseline = Path(run.args[run.args.index("--tts-baseline") + 1])
    assert not baseline.is_relative_to(reports)
    [thaw] = [c for c in commands_of("nightly.yml") if c.tool == "tts-bench"]
    assert check_tts_bench(thaw) == "thaw"


def test_the_checker_rejects_what_does_not_exist(at_root_scenarios: pytest.Pytester) -> None:
    """The checks above can fail: an unknown marker, option, value or subcommand is caught."""
    bad = [
        ["pytest", "scenarios", "-m", "qmax or speed"],
        ["pytest", "scenarios", "-m", "qmax", "--no-such-option", "1"],
        ["pytest", "scenarios", "-m", "qmax", "--tts-ladder", "5,1"],
        ["pytest", "scenarios", "-m", "qmax", "--ladder", "1,2"],  # tts-bench's spelling
        ["pytest", "scenarios", "-m", "drift and qmax"],  # selects nothing
    ]
    for argv in bad:
        with pytest.raises(AssertionError):
            check_pytest(Command("test", argv), at_root_scenarios)
    with pytest.raises(AssertionError):
        check_tts_bench(Command("test", ["tts-bench", "measure"]))
    with pytest.raises(AssertionError):
        check_tts_bench(Command("test", ["tts-bench", "thaw", "--endpoint", "x", "--frozen"]))
    assert "--tts-baseline" in PLUGIN_FLAGS


def test_the_readme_pictures_run_command_is_accepted(at_root_scenarios: pytest.Pytester) -> None:
    """run.txt names the `make qmax` behind the README's first picture: pytest accepts its ARGS."""
    text = (ROOT / "reports" / "examples" / "local-run" / "run.txt").read_text()
    [made] = re.findall(r"^\s*make qmax ARGS=(\"[^\"]*\")$", text, flags=re.MULTILINE)
    recipe = (ROOT / "Makefile").read_text().split("\nqmax:", 1)[1].splitlines()[1]
    make_pytest = shlex.split(recipe.strip().replace("$(BIN)/", "").replace("$(ARGS)", ""))
    argv = [*make_pytest, *shlex.split(shlex.split(made)[0])]
    assert check_pytest(Command("run.txt", argv), at_root_scenarios) >= 1
