"""GPU-only tests live in tests/gpu/, read from the sources with ``ast``.

No file outside tests/gpu/ marks anything gpu (a decorator, a module's ``pytestmark``, ``marks=`` of a
``pytest.param``), so a machine without CUDA, which does not collect tests/gpu/ (tests/conftest.py), collects
no GPU-only test and its skip count is the CPU suite's own. Every test file in tests/gpu/ marks its module gpu,
so one collected by hand on such a machine skips each test with the reason. The schedules (the CPU deal in the
root conftest.py, the GPU suite's in tests/conftest.py) name files and tests that exist.
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
GPU = TESTS / "gpu"


def _is_gpu_mark(node: ast.AST) -> bool:
    """``pytest.mark.gpu`` or ``mark.gpu``, called or not."""
    if isinstance(node, ast.Call):
        node = node.func
    if not (isinstance(node, ast.Attribute) and node.attr == "gpu"):
        return False
    owner = node.value
    return (isinstance(owner, ast.Attribute) and owner.attr == "mark") or (isinstance(owner, ast.Name)
                                                                           and owner.id == "mark")


def _holds_gpu_mark(node: ast.AST) -> bool:
    return any(_is_gpu_mark(n) for n in ast.walk(node))


def _is_pytestmark(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)


def gpu_marks(source: str) -> list[str]:
    """Each place the source marks something gpu: 'line N: <where>'."""
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found |= {(d.lineno, f"decorator of {node.name}") for d in node.decorator_list if _holds_gpu_mark(d)}
        elif _is_pytestmark(node) and _holds_gpu_mark(node.value):
            found.add((node.lineno, "pytestmark"))
        elif isinstance(node, ast.Call):
            found |= {(node.lineno, "marks= of a param") for k in node.keywords
                      if k.arg == "marks" and _holds_gpu_mark(k.value)}
    return [f"line {line}: {where}" for line, where in sorted(found)]


def _module_marks_gpu(source: str) -> bool:
    """A module-level ``pytestmark`` that holds the gpu mark (alone or in a list)."""
    return any(_is_pytestmark(node) and _holds_gpu_mark(node.value) for node in ast.parse(source).body)


def _outside_the_gpu_tree() -> dict[str, Path]:
    return {p.relative_to(TESTS).as_posix(): p for p in sorted(TESTS.rglob("*.py")) if GPU not in p.parents}


def test_nothing_outside_tests_gpu_is_marked_gpu():
    marked = {name: gpu_marks(path.read_text()) for name, path in _outside_the_gpu_tree().items()}
    bad = [f"tests/{name} {where}" for name, places in marked.items() for where in places]
    assert bad == [], "GPU-only tests belong in tests/gpu/<the same path> (a CPU run does not collect it):\n" + \
        "\n".join(bad)


def test_every_test_file_in_tests_gpu_marks_its_module_gpu():
    files = sorted(GPU.rglob("test_*.py"))
    assert files, "tests/gpu/ holds no test file"
    unmarked = [p.relative_to(TESTS).as_posix() for p in files if not _module_marks_gpu(p.read_text())]
    assert unmarked == [], "each needs pytestmark = pytest.mark.gpu (or a list holding it): " + ", ".join(unmarked)


@pytest.mark.parametrize("source, where", [
    ("@pytest.mark.gpu\ndef test_a(): pass\n", ["line 1: decorator of test_a"]),
    ("@pytest.mark.parametrize('x', [1])\n@pytest.mark.gpu\ndef test_a(x): pass\n", ["line 2: decorator of test_a"]),
    ("from pytest import mark\n@mark.gpu\nclass TestA: pass\n", ["line 2: decorator of TestA"]),
    ("pytestmark = pytest.mark.gpu\n", ["line 1: pytestmark"]),
    ("pytestmark = [pytest.mark.gpu, pytest.mark.skipif(True, reason='r')]\n", ["line 1: pytestmark"]),
    ("CASES = ['cpu', pytest.param('cuda', marks=pytest.mark.gpu)]\n", ["line 1: marks= of a param"]),
    ("CASES = [pytest.param(*c, marks=[pytest.mark.gpu] if c[2] == 'cuda' else []) for c in ROWS]\n",
     ["line 1: marks= of a param"]),
    ("def pytest_collection_modifyitems(items):\n    return [i for i in items if 'gpu' in i.keywords]\n", []),
    ("@pytest.mark.skipif(True, reason='gpu')\ndef test_a(): pass\npytestmark = pytest.mark.browser\n", []),
], ids=["decorator", "decorator-under-parametrize", "mark-imported-on-a-class", "pytestmark", "pytestmark-list",
        "param-marks", "param-marks-computed", "the-word-gpu", "other-marks"])
def test_the_reader_sees_each_way_of_marking_gpu(source, where):
    assert gpu_marks(source) == where


def test_a_module_is_marked_gpu_by_its_own_pytestmark_alone_or_in_a_list():
    assert _module_marks_gpu("pytestmark = pytest.mark.gpu\n")
    assert _module_marks_gpu("pytestmark = [pytest.mark.gpu, needs_toolchain]\n")
    assert not _module_marks_gpu("pytestmark = pytest.mark.browser\n")
    assert not _module_marks_gpu("def helper():\n    pytestmark = pytest.mark.gpu\n")


# ---- the GPU suite's schedule (tests/conftest.py: spread_longest)

def test_each_of_the_gpu_suites_longest_tests_names_a_test_that_exists():
    """A renamed or deleted test would drop out of the schedule without a word: each name must still be a test
    function in its file."""
    from tests.conftest import GPU_LONGEST_FIRST

    for nodeid in GPU_LONGEST_FIRST:
        path, name = nodeid.split("::")
        tree = ast.parse((TESTS.parent / path).read_text())
        functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name.split("[")[0] in functions, nodeid


@pytest.mark.parametrize("n_items, workers", [(3415, 15), (100, 4), (31, 15), (5, 15), (40, 1)])
def test_the_longest_tests_start_each_workers_share_and_nothing_else_moves_out_of_order(n_items, workers):
    from tests.conftest import share_starts, spread_longest

    items = [f"t{i}" for i in range(n_items)]
    longest = tuple(items[-1:-13:-1]) + ("gone",)  # the last dozen, longest first, and one no longer collected
    out = spread_longest(items, longest, workers, nodeid=str)
    assert sorted(out) == sorted(items)
    if n_items < 2 * workers:
        assert out == items
        return
    starts = share_starts(n_items, workers)
    heads = [out[at + depth] for depth in range(-(-12 // workers)) for at in starts][:12]
    assert heads == list(longest[:12])
    rest = [t for t in out if t not in longest]
    assert rest == [t for t in items if t not in longest]


# ---- the CPU deal (the root conftest.py: LONGEST_FIRST, csrc_units)

def _root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", TESTS.parent / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_of_the_cpu_deals_longest_units_names_a_file_that_exists():
    root = _root_conftest()
    for unit in root.LONGEST_FIRST:
        assert (TESTS.parent / unit).is_file(), unit


def test_files_that_share_a_cell_in_the_checkouts_csrc_run_in_one_unit():
    """The races the deal prevents (01's draft of scale_vec read by 04, 08 or the README's test) stay in one unit,
    and no cell a file saves is named by a file of another unit."""
    root = _root_conftest()
    units = root.csrc_units()
    assert {f for f, unit in units.items() if unit == root.CHECKOUT_CSRC} >= {
        "notebooks/01_add_jit_kernel.ipynb", "notebooks/04_benchmarking.ipynb", "notebooks/08_inside_a_kernel.ipynb",
        "tests/test_readme.py"}
    codes = {f: root._code(TESTS.parent / f) for f in units}
    for saver, code in codes.items():
        cells = {a or b for a, b in root.SAVED_CELL.findall(code)}
        assert cells or "csrc" in code, f"{saver} uses csrc/ but saves no cell the deal can read"
        for other, text in codes.items():
            if units[other] != units[saver]:
                assert not any(cell in text for cell in cells), (saver, other, cells)
