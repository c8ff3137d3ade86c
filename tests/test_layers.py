"""Layers point one way and no module of rapid_llm is in an import cycle, read from the sources.

Every ``import`` / ``from ... import`` statement counts, at module level or inside
a function: a lazy import is still a dependency. Imports made by computed name
(importlib.import_module of a string) are how the registry discovers op groups
and how the package's __getattr__ exports names; they are not edges here.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rapid_llm"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
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
            for target in targets:
                # the longest module prefix of the imported name (``from x import y``: y may be a module or a name)
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("rapid_llm"):
                    graph[name].add(target)
    return graph


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


@pytest.mark.parametrize("module", ["rapid_llm.kernels.dispatch.dispatcher", "rapid_llm.kernels.verification.golden",
                                    "rapid_llm.kernels.build.jit", "rapid_llm.bench.ops"])
def test_the_graph_sees_real_edges(module):
    assert _graph()[module], f"{module} should import something of rapid_llm; the reader is broken"
