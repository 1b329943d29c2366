"""Structure guards: a light plugin import, no import cycles, a pure core without file I/O,
the container and infra apart, and in all the product's code (plugin, container, CDK stacks) no
function over 100 lines and no closure reading a name its enclosing function assigns later. The
package's layers are contracts in .importlinter.

Static where it can be (the import graph is read with `ast`, nothing is imported), so a guard
fails on the line that breaks it, not on whatever that line happens to pull in at run time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

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


# Where the product's code is: the plugin, the container and the CDK stacks.
PRODUCT = (
    PACKAGE,
    PACKAGE.parent / "container" / "tts_container",
    PACKAGE.parent / "infra" / "speech_infra",
)
FUNCTION_MAX_LINES = 100


def product_sources() -> dict[str, str]:
    """Each product module's source by its path in the repository."""
    sources: dict[str, str] = {}
    for folder in PRODUCT:
        paths = sorted(folder.rglob("*.py"))
        assert paths, f"no Python modules under {folder}"
        sources |= {
            str(p.relative_to(PACKAGE.parent)): p.read_text(encoding="utf-8") for p in paths
        }
    return sources


def long_functions(source: str) -> list[str]:
    """Functions and methods over FUNCTION_MAX_LINES lines, decorators not counted."""
    return [
        f"{node.name}:{node.lineno} has {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_MAX_LINES
    ]


@dataclass(eq=False)
class _Scope:
    """One scope: its kind, where it starts, its own bindings (name: lines) and declarations."""

    kind: Literal["module", "function", "class", "comprehension"]
    name: str
    line: int
    bound: dict[str, list[int]] = field(default_factory=dict)
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)

    def binds(self, name: str) -> bool:
        return name in self.bound and name not in self.globals | self.nonlocals


class _Reads(ast.NodeVisitor):
    """Every name read, with the chain of scopes it is read in (module first).

    A function's defaults and decorators, a class's bases and a comprehension's first iterable
    belong to the enclosing scope; annotations are left out (postponed, never evaluated here).
    """

    def __init__(self) -> None:
        self.stack: list[_Scope] = []
        self.reads: list[tuple[str, int, tuple[_Scope, ...]]] = []

    def bind(self, name: str, line: int, scope: _Scope | None = None) -> None:
        (scope or self.stack[-1]).bound.setdefault(name, []).append(line)

    def scoped(self, scope: _Scope, body: list[ast.AST]) -> None:
        self.stack.append(scope)
        for child in body:
            self.visit(child)
        self.stack.pop()

    def visit_Module(self, node: ast.Module) -> None:
        self.scoped(_Scope("module", "<module>", 0), list(node.body))

    def visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        args = node.args
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self.visit(default)
        name = "a lambda"
        if not isinstance(node, ast.Lambda):
            for decorator in node.decorator_list:
                self.visit(decorator)
            self.bind(node.name, node.lineno)
            name = node.name
        scope = _Scope("function", name, node.lineno)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                self.bind(arg.arg, node.lineno, scope)
        self.scoped(scope, list(node.body) if isinstance(node.body, list) else [node.body])

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self.bind(node.name, node.lineno)
        self.scoped(_Scope("class", node.name, node.lineno), list(node.body))

    def visit_comprehension_scope(
        self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
    ) -> None:
        first, *rest = node.generators
        self.visit(first.iter)
        parts: list[ast.AST] = [first.target, *first.ifs]
        for generator in rest:
            parts += [generator.target, generator.iter, *generator.ifs]
        parts += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        self.scoped(_Scope("comprehension", "a comprehension", node.lineno), parts)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_comprehension_scope

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        owner = next(s for s in reversed(self.stack) if s.kind != "comprehension")
        self.bind(node.target.id, node.lineno, owner)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.reads.append((node.id, node.lineno, tuple(self.stack)))
        else:
            self.bind(node.id, node.lineno)

    def visit_alias(self, node: ast.alias) -> None:
        self.bind(node.asname or node.name.split(".")[0], node.lineno)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.bind(node.name, node.lineno)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.stack[-1].globals.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        """A nonlocal name is read from the enclosing function, whatever it is used for."""
        self.stack[-1].nonlocals.update(node.names)
        self.reads.extend((name, node.lineno, tuple(self.stack)) for name in node.names)

    def visit_match_capture(self, node: ast.MatchAs | ast.MatchStar | ast.MatchMapping) -> None:
        captured = node.rest if isinstance(node, ast.MatchMapping) else node.name
        if captured:
            self.bind(captured, node.lineno)
        self.generic_visit(node)

    visit_MatchAs = visit_MatchStar = visit_MatchMapping = visit_match_capture


def late_closure_reads(source: str) -> list[str]:
    """Nested functions (lambdas, methods of a nested class) reading a name of an enclosing
    function that the enclosing function assigns only after the nested one is defined.

    Such a read works only while nobody calls the nested function before the assignment runs:
    the order of calls, not the code, keeps it right.
    """
    reads = _Reads()
    reads.visit(ast.parse(source))
    found = set()
    for name, line, chain in reads.reads:
        if chain[-1].binds(name) or name in chain[-1].globals:
            continue
        for depth in range(len(chain) - 2, 0, -1):
            scope = chain[depth]
            if scope.kind == "class":
                continue  # a class's names are not visible inside its methods
            if name in scope.globals:
                break
            if not scope.binds(name):
                continue
            # What closes over the name: a comprehension runs where it stands, so it is skipped.
            nested = next((s for s in chain[depth + 1 :] if s.kind != "comprehension"), None)
            first = min(scope.bound[name])
            if nested is not None and first > nested.line:
                found.add(
                    f"{nested.name} (line {nested.line}) reads {name!r} at line {line}; "
                    f"{scope.name} assigns it only from line {first} on"
                )
            break
    return sorted(found)


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function `lines` long, def line and return included."""
    body = "".join(f"{indent}    step_{index} = {index}\n" for index in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


@pytest.mark.parametrize(
    ("source", "found"),
    [
        pytest.param(_function("f", 101), ["f:1 has 101 lines"], id="101-lines"),
        pytest.param(_function("f", 100), [], id="100-lines"),
        pytest.param(
            "class C:\n    @property\n" + _function("m", 101, "    ").replace("def", "async def"),
            ["m:3 has 101 lines"],
            id="a-decorated-async-method",
        ),
        pytest.param(
            "def outer():\n" + _function("inner", 101, "    ") + "    return inner\n",
            ["outer:1 has 103 lines", "inner:2 has 101 lines"],
            id="nested",
        ),
    ],
)
def test_long_functions_counts_each_function(source: str, found: list[str]) -> None:
    assert long_functions(source) == found


LATE = "reads 'later' at line {read}; outer assigns it only from line {assigned} on"


@pytest.mark.parametrize(
    ("source", "found"),
    [
        pytest.param(
            "def outer():\n    def inner():\n        return later\n    later = 1\n",
            ["inner (line 2) " + LATE.format(read=3, assigned=4)],
            id="nested-def",
        ),
        pytest.param(
            "def outer():\n    done = lambda: later\n    later = 1\n",
            ["a lambda (line 2) " + LATE.format(read=2, assigned=3)],
            id="lambda",
        ),
        pytest.param(
            "def outer():\n    def inner():\n        def deeper():\n            return later\n"
            "        return deeper\n    later = 1\n",
            ["inner (line 2) " + LATE.format(read=4, assigned=6)],
            id="two-deep",
        ),
        pytest.param(
            "def outer():\n    class Held:\n        def get(self):\n            return later\n"
            "    later = 1\n",
            ["Held (line 2) " + LATE.format(read=4, assigned=5)],
            id="method-of-a-nested-class",
        ),
        pytest.param(
            "def outer():\n    def count():\n        nonlocal later\n        later += 1\n"
            "    later = 0\n",
            ["count (line 2) " + LATE.format(read=3, assigned=5)],
            id="nonlocal",
        ),
        pytest.param(
            "def outer():\n    def first():\n        return later()\n    def later():\n"
            "        return 1\n",
            ["first (line 2) " + LATE.format(read=3, assigned=4)],
            id="a-helper-defined-after",
        ),
        pytest.param(
            "def outer():\n    calls = [lambda: later for _ in range(2)]\n    later = 1\n",
            ["a lambda (line 2) " + LATE.format(read=2, assigned=3)],
            id="lambda-in-a-comprehension",
        ),
        pytest.param(
            "def outer(later):\n    def inner():\n        return later\n    later = 2\n",
            [],
            id="a-parameter",
        ),
        pytest.param(
            "def outer():\n    later = 0\n    def inner():\n        return later\n    later = 1\n",
            [],
            id="assigned-before-too",
        ),
        pytest.param(
            "def outer():\n    def inner():\n        later = 1\n        return later\n"
            "    later = 2\n",
            [],
            id="the-nested-function-own",
        ),
        pytest.param(
            "def outer():\n    def inner():\n        global later\n        return later\n"
            "    later = 2\n",
            [],
            id="global",
        ),
        pytest.param(
            "def outer():\n    first = [later for _ in range(2)]\n    later = 1\n",
            [],
            id="a-comprehension-runs-in-place",
        ),
        pytest.param(
            "class Outer:\n    def inner(self):\n        return later\n    later = 1\n",
            [],
            id="class-attributes-are-not-closed-over",
        ),
    ],
)
def test_late_closure_reads_finds_each_late_read(source: str, found: list[str]) -> None:
    assert late_closure_reads(source) == found


def test_no_product_function_over_100_lines() -> None:
    """Split a longer one into well-named pieces: each piece can be read, named and tested."""
    found = {
        path: hits for path, source in product_sources().items() if (hits := long_functions(source))
    }
    assert found == {}


def test_no_product_closure_reads_a_name_assigned_after_it() -> None:
    """Pass the value as an argument, or assign it before the nested function is defined."""
    found = {
        path: hits
        for path, source in product_sources().items()
        if (hits := late_closure_reads(source))
    }
    assert found == {}
