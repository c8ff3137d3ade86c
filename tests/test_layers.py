"""Layers point one way and no module of rapid_llm is in an import cycle, read from the sources.

Every ``import`` / ``from ... import`` statement counts, at module level or inside
a function: a lazy import is still a dependency. So does a string that names a
module the way lazy references do (``"rapid_llm.x.y:attr"``, a row's target or
probe, a discoverer) or that ``importlib.import_module`` is called with: an edge
by name is still an edge. The registry's discovery of the op groups (a computed
name) and the facade's ``_EXPORTS`` table (the top of the package) are the two
imports by name that point down and that this reader does not see.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rapid_llm"
#: "rapid_llm.pkg.mod:attr", the lazy reference form (a row's target, a probe, a discoverer).
_REF = re.compile(r"^(rapid_llm(?:\.\w+)+):\w+$")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # read once a session: parsing the package takes about 0.8 s, and nine tests ask
def _graph() -> dict[str, frozenset[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _REF.match(node.value):
                targets = [_REF.match(node.value).group(1)]
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                targets = [node.args[0].value]
            for target in targets:
                # the longest module prefix of the imported name (``from x import y``: y may be a module or a name)
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("rapid_llm"):
                    graph[name].add(target)
    return {name: frozenset(targets) for name, targets in graph.items()}


def test_the_core_imports_nothing_from_bench_or_notebook():
    graph = _graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("rapid_llm.kernels")
                 for t in ts if t.startswith(("rapid_llm.bench", "rapid_llm.notebook")))
    assert bad == [], "the core imports the layers above it:\n" + "\n".join(bad)


def test_bench_imports_nothing_from_notebook():
    graph = _graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("rapid_llm.bench")
                 for t in ts if t.startswith("rapid_llm.notebook"))
    assert bad == [], "\n".join(bad)


def test_no_import_cycles():
    graph = _graph()
    # Packages are reached through their submodules; an edge into a package's __init__ from its own
    # submodule is how Python imports work, not a design cycle, so __init__ files only count as importers.
    packages = {m for m in graph if (ROOT.parent / m.replace(".", "/") / "__init__.py").exists()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node] - packages):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


#: The core's subsystems, bottom up. A package imports only from floors below it; two packages on one floor
#: do not import each other. The facade (rapid_llm.kernels itself) sits above them all and wires them.
FLOORS = {
    "rapid_llm.kernels.platform": 0,
    "rapid_llm.kernels.registry": 1,
    "rapid_llm.kernels.toolchain": 2,
    "rapid_llm.kernels.dispatch": 3,
    "rapid_llm.kernels.verification": 3,
    "rapid_llm.kernels.inspection": 4,
    "rapid_llm.kernels.ops": 5,
}


def _floor_of(module: str) -> tuple[str, int] | None:
    for package, floor in FLOORS.items():
        if module == package or module.startswith(package + "."):
            return package, floor
    return None


def test_every_core_module_is_on_a_floor():
    loose = sorted(m for m in _graph() if m.startswith("rapid_llm.kernels.") and _floor_of(m) is None)
    assert loose == [], "modules of rapid_llm.kernels outside its subsystem packages:\n" + "\n".join(loose)


def test_each_subsystem_imports_only_the_floors_below_it():
    bad = []
    for module, targets in _graph().items():
        here = _floor_of(module)
        for target in targets:
            there = _floor_of(target)
            if here is None or there is None or here[0] == there[0]:
                continue
            if there[1] >= here[1]:
                bad.append(f"{module} (floor {here[1]}) -> {target} (floor {there[1]})")
    assert bad == [], "imports that point up or sideways:\n" + "\n".join(sorted(bad))


def test_string_references_are_edges():
    """The reader sees a lazy reference: the facade's discoverer wiring is an edge down into build."""
    assert "rapid_llm.kernels.toolchain.jit_row" in _graph()["rapid_llm.kernels"]


@pytest.mark.parametrize("module", ["rapid_llm.kernels.dispatch.dispatcher", "rapid_llm.kernels.verification.golden",
                                    "rapid_llm.kernels.toolchain.jit", "rapid_llm.bench.ops"])
def test_the_graph_sees_real_edges(module):
    assert _graph()[module], f"{module} should import something of rapid_llm; the reader is broken"


# ------------------------------------------------------------------ nothing outside tests/ imports them

REPO = ROOT.parent
#: The trees that run without the tests. The tests' fixtures (cheat rows, defect kernels) stay in tests/; a script
#: that runs them takes their path as an argument.
RUNNABLE = ("rapid_llm", "scripts", "benchmarks")
#: "tests.pkg.mod:attr", a lazy reference into the tests.
_TESTS_REF = re.compile(r"^tests(?:\.\w+)*:\w+$")


def imports_of_tests(source: str) -> list[tuple[int, str]]:
    """(line, name) of every import of the ``tests`` package in ``source``: ``import tests...``, ``from tests...
    import ...``, ``import_module("tests...")`` or ``__import__("tests...")``, and a lazy ``"tests....:attr"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _TESTS_REF.match(node.value):
            names = [node.value]
        elif (isinstance(node, ast.Call)
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        found += [(node.lineno, n) for n in names if n.split(":")[0] == "tests" or n.startswith("tests.")]
    return found


def test_nothing_outside_the_tests_imports_them():
    bad = [f"{path.relative_to(REPO)}:{line}: {name}" for top in RUNNABLE for path in sorted((REPO / top).rglob("*.py"))
           for line, name in imports_of_tests(path.read_text())]
    assert bad == [], "the package, scripts/ and benchmarks/ must run without tests/:\n" + "\n".join(bad)


@pytest.mark.parametrize("source", [
    "import tests", "import tests.conftest as c", "from tests.contract.cheats import cheat_rows",
    "from tests import jit_builders", "def f():\n    from tests.unit.bench import x\n",
    "importlib.import_module('tests.reference')", "__import__('tests.hang_guard')",
    "ROW = 'tests.contract.cheats.cheat_rows:scale_in_bf16'",
])
def test_the_reader_sees_each_form_of_import_of_the_tests(source):
    assert imports_of_tests(source), source


def test_the_reader_passes_other_names():
    source = ("import testsuite\nfrom .tests import x\nfrom rapid_llm.tests_helpers import y\n"
              "ROWS = 'tests/contract/cheats/cheat_rows.py'\nMSG = 'tests: 3 passed'\nREF = 'rapid_llm.x:tests'\n")
    assert imports_of_tests(source) == []
