"""Structure guards: a light plugin import, no import cycles, a pure core without file I/O,
the container and infra apart. The package's layers are contracts in .importlinter.

Static where it can be (the import graph is read with `ast`, nothing is imported), so a guard
fails on the line that breaks it, not on whatever that line happens to pull in at run time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_tts_scaling"

# Installing the package costs a project nothing until a step is used.
HEAVY = (
    "numpy",
    "pydantic",
    "jinja2",
    "jmespath",
    "boto3",
    "torch",
    "matplotlib",
    "locust",
    "mlflow",
)

# Plans, statistics and verdicts: numbers in, numbers out. Which modules they may import is the
# "pure core" contract in .importlinter (tests/test_import_contracts.py); here, that they call no
# file I/O, which an import graph cannot see.
PURE_CORE = ("calibration.disciplines", "calibration.truth", "core", "errors")
IO_CALLS = frozenset({"open", "read_text", "write_text", "read_bytes", "write_bytes"})

# Below the steps nothing names the doors' options, not even for a type: each step's inputs
# carry what it needs. The no-door-options contract in .importlinter holds it for imports that
# run; this guard for `if TYPE_CHECKING:` imports too, which the contract does not see.
BELOW_THE_STEPS = ("core", "load", "endpoints", "aws", "fleet", "report", "tracking", "calibration")
DOOR_OPTIONS = frozenset(
    f"pytest_tts_scaling.{name}" for name in ("options", "option_table", "stash")
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(name: str) -> set[str]:
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), package)


def imports_in(source: str, package: str, *, type_checking: bool = False) -> set[str]:
    """Every module `source` imports at run time: module level and inside functions.

    Function-level imports count: a cycle moved into a function body is still two modules that
    each need the other, it only fails later. `if TYPE_CHECKING:` blocks do not run, so they
    do not count, unless `type_checking` asks for them too.
    """
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(
                f"{target}.{alias.name}"
                for alias in node.names
                if f"{target}.{alias.name}" in MODULES
            )
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def internal_graph() -> dict[str, set[str]]:
    return {name: {i for i in imports_of(name) if i in MODULES and i != name} for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as the list of modules around it, or None (depth-first, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_tts_scaling.plugin\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "", f"importing the plugin imported: {done.stdout.strip()}"


def test_a_pytest_run_that_uses_no_step_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    """Options parsed, markers and fixtures registered, a test run: still nothing heavy.

    pytest-html and pytest-metadata are left out: pytest-html imports jinja2 itself.
    """
    pytester.makepyfile(
        f"""
        import sys

        def test_light(tts_options):
            loaded = [m for m in {HEAVY!r} if m in sys.modules]
            assert loaded == []
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:html", "-p", "no:metadata", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_find_cycle_reports_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_among_the_package_modules() -> None:
    cycle = find_cycle(internal_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_pure_core_calls_no_file_io() -> None:
    prefixes = tuple(f"pytest_tts_scaling.{name}" for name in PURE_CORE)
    core = {m for m in MODULES if m in prefixes or m.startswith(tuple(f"{p}." for p in prefixes))}
    problems: list[str] = []
    for full in sorted(core):
        short = full.removeprefix("pytest_tts_scaling.")
        tree = ast.parse(MODULES[full].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if called in IO_CALLS:
                    problems.append(f"{short}:{node.lineno} calls {called}()")
    assert core, "no pure core modules found"
    assert problems == []


def test_imports_in_reads_function_bodies_and_skips_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pytest_tts_scaling.options import RunOptions\n"
        "def f():\n    import socket\n    from .core import schema\n    return socket\n"
    )
    found = imports_in(source, "pytest_tts_scaling")
    assert {"socket", "pytest_tts_scaling.core", "pytest_tts_scaling.core.schema"} <= found
    assert "pytest_tts_scaling.options" not in found


def test_imports_in_can_read_type_checking_imports_too() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..options import RunOptions\n"
    )
    assert "pytest_tts_scaling.options" in imports_in(
        source, "pytest_tts_scaling.core", type_checking=True
    )


def test_nothing_below_the_steps_names_the_doors_options_even_for_a_type() -> None:
    below = tuple(f"pytest_tts_scaling.{name}" for name in BELOW_THE_STEPS)
    named = {
        full.removeprefix("pytest_tts_scaling."): sorted(
            imports_in(
                MODULES[full].read_text(encoding="utf-8"),
                full if MODULES[full].name == "__init__.py" else full.rpartition(".")[0],
                type_checking=True,
            )
            & DOOR_OPTIONS
        )
        for full in MODULES
        if full.startswith(tuple(f"{p}." for p in below)) or full in below
    }
    assert named, "no modules found below the steps"
    assert {module: found for module, found in named.items() if found} == {}


def test_every_e2e_module_exists_and_scenarios_are_e2e(pytestconfig: pytest.Config) -> None:
    root = Path(__file__).resolve().parents[1]
    conftest = pytestconfig.pluginmanager.get_plugin(str(root / "conftest.py"))
    assert conftest is not None, "the repository's conftest.py is not loaded"
    missing = sorted(m for m in conftest.E2E_MODULES if not (root / m).is_file())
    assert missing == []
    assert conftest.is_e2e(root / "scenarios" / "test_qmax.py")
    assert conftest.is_e2e(root / "tests" / "test_local_e2e.py")
    assert not conftest.is_e2e(Path(__file__))


def _imports_under(folder: Path, package: str) -> dict[str, set[str]]:
    found = {}
    for path in sorted(folder.rglob("*.py")):
        if "build" in path.relative_to(folder).parts:
            continue
        found[str(path.relative_to(folder))] = imports_in(path.read_text(encoding="utf-8"), package)
    return found


def test_boundaries_the_container_ships_alone_and_infra_reads_through_the_schema() -> None:
    root = PACKAGE.parent
    container = _imports_under(root / "container" / "tts_container", "tts_container")
    assert {n: i for n, i in container.items() if any(x.startswith("pytest_tts") for x in i)} == {}
    infra = _imports_under(root / "infra" / "speech_infra", "speech_infra")
    allowed = {f"pytest_tts_scaling.{name}" for name in ("core.schema", "artifacts", "errors")}
    used = {i for imports in infra.values() for i in imports if i.startswith("pytest_tts_scaling")}
    assert used - allowed == set()


def test_pytest_adapters_never_import_the_command_line() -> None:
    """Scenarios and fixtures run steps/ directly: a rule reached through commands/ is a copy."""
    root = PACKAGE.parent
    adapters = {path: "scenarios" for path in sorted((root / "scenarios").glob("*.py"))}
    adapters[PACKAGE / "fixtures.py"] = "pytest_tts_scaling"
    crossing = {
        str(path.relative_to(root)): sorted(
            i
            for i in imports_in(path.read_text(encoding="utf-8"), package)
            if i == "pytest_tts_scaling.commands" or i.startswith("pytest_tts_scaling.commands.")
        )
        for path, package in adapters.items()
    }
    assert {name: found for name, found in crossing.items() if found} == {}
