"""How pytest-xdist deals this suite out to its workers (``-n N --dist loadfile``, as the README's test command runs).

As with plain ``--dist loadfile``, each file goes to one worker, whole and in order: under nbval a notebook's cells
share one kernel, and a module's fixtures (the browser test's JupyterLab and Chromium) serve its tests. Beyond that,
files that would race on the checkout's ``csrc/`` make one unit, run one after another on one worker. A notebook's
%%cuda_jit cells save there and some read cells back: notebook 01 saves a draft of scale_vec that does not compile
and then its fix under the same name, notebook 04 reads 01's and 06's cells back and runs them again, notebook 08
saves a scale_naive as 01 does, and tests/test_readme.py runs 01's cell from there; any of them beside 01 can find
the draft. Two files share a unit when one names a cell the other saves (``csrc_units``), read from their code, so a
new tutorial needs no entry here; a notebook whose cells no other file names (07, 09, 11) runs beside the rest. The
browser test runs its notebooks in a project of its own (tests/e2e/browser/conftest.py) and needs none either.

The longest units are dealt first (LONGEST_FIRST), so that the run does not end on one of them alone.
"""
from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

# Under pytest-xdist the processes a worker starts (nbval's kernels, the browser test's JupyterLab kernels, the
# verify worker, a test's subprocess) get the worker's share of the cores for their OpenMP threads, as the worker
# itself does (tests/conftest.py). torch would otherwise start a thread per core in each, and a thread that waits
# at the end of a parallel region spins on a core the other worker needs: notebook 04 under nbval, beside one
# busy process on two cores, took 62-70 s with two threads and 35-40 s with one (two runs each).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))

#: Test files, besides the notebooks, that read or write the checkout's csrc/.
USES_CHECKOUT_CSRC = ("tests/test_readme.py",)
#: The unit of the files that share notebook 01's cells (a unit is named after its first file).
CHECKOUT_CSRC = "notebooks/01_add_jit_kernel.ipynb"
#: A cell a file saves: ``%%cuda_jit NAME ...``, or ``run_cell_magic("cuda_jit", "NAME ...")``.
SAVED_CELL = re.compile(r'^%%cuda_jit\s+(\w+)|run_cell_magic\(\s*"cuda_jit",\s*"(\w+)', re.M)
#: Units dealt first, in this order (seconds each took in a run of the README's command on CI's two cores, three
#: workers, as it then ran); the rest follow as loadfile deals them, most tests first. Only the order changes, and a
#: unit that is gone is passed over: a long file of few tests left to the end runs alone while the other workers have
#: nothing left to do (the Ray sweep, dealt last as a one-test file, once ended a run 25 s after the other workers had
#: finished). The order is not simply the longest first: dealt that way (the browser test and the Ray sweep, which
#: keep Chromium, JupyterLab and Ray's daemons busy for as long as they run, beside the nbval and Triton work at the
#: start) one run took 386.7 s against 337.4 s for this order (one run each).
LONGEST_FIRST = (CHECKOUT_CSRC,  # about 95 s: nbval of 01, 04 (its benchmarks), 06 and 08, and the README
                 "tests/contract/test_rows.py",  # about 80 s, Triton rows in the interpreter
                 "tests/contract/test_custom_ops.py",  # about 70 s, opcheck's AOT tracing of every op
                 "tests/unit/toolchain/test_cu_compile.py",  # about 45 s of nvcc
                 "tests/e2e/browser/test_jupyterlab.py",  # about 65 s
                 "tests/contract/test_cheats.py",  # about 35 s
                 "tests/unit/toolchain/test_build_kill.py",  # about 40 s
                 "tests/unit/bench/test_sweep_ray.py",  # about 50 s, most of it Ray's start
                 "tests/unit/verification/test_isolate.py",  # about 30 s
                 "tests/contract/test_jit_row_checks.py",  # about 30 s
                 "tests/unit/toolchain/test_cell_race.py",  # about 17 s: four processes building cells at once
                 "tests/benchmarks/test_bench_scripts.py",  # about 10 s: a C++ extension build, torch.compile
                 "tests/unit/bench/test_sweep.py",  # about 17 s
                 "tests/unit/verification/test_defects_build.py",  # about 20 s
                 "tests/unit/bench/test_tune.py",  # about 20 s in six tests
                 "tests/unit/toolchain/test_promote.py",  # about 18 s
                 "tests/unit/toolchain/test_jit_cache.py",  # about 14 s
                 "tests/unit/notebook/test_magic_compile_only.py",  # about 14 s in five tests
                 "tests/unit/toolchain/test_promote_kill.py")  # about 13 s in two tests


def _code(path: Path) -> str:
    """A notebook's code cells, or a test file's text ('' where it cannot be read)."""
    try:
        if path.suffix != ".ipynb":
            return path.read_text()
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return ""
    return "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")


def uses_checkout_csrc(notebook: Path) -> bool:
    """Whether a notebook's code saves a %%cuda_jit cell or reads one back (the magic, or a path into csrc)."""
    code = _code(notebook)
    return "cuda_jit" in code or "csrc" in code


def checkout_csrc_files() -> set[str]:
    """The files (as pytest names them, from the repository root) that use the checkout's csrc/."""
    notebooks = {f"notebooks/{nb.name}" for nb in sorted((ROOT / "notebooks").glob("*.ipynb")) if uses_checkout_csrc(nb)}
    return notebooks | set(USES_CHECKOUT_CSRC)


def csrc_units() -> dict[str, str]:
    """Each file that uses the checkout's csrc/, and the unit it runs in (named after the unit's first file): a file
    that names a cell another saves (as a word of its code: a path, a loop's list, a cell of the same name) runs
    in that file's unit."""
    codes = {name: _code(ROOT / name) for name in sorted(checkout_csrc_files())}
    unit = {name: name for name in codes}

    def root(name: str) -> str:
        while unit[name] != name:
            name = unit[name]
        return name

    for saver, code in codes.items():
        for cell in {a or b for a, b in SAVED_CELL.findall(code)}:
            named = re.compile(rf"\b{cell}\b")
            for other, text in codes.items():
                if other != saver and named.search(text):
                    first, second = sorted((root(saver), root(other)))
                    unit[second] = first
    return {name: root(name) for name in codes}


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # optional: a run without pytest-xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001 - xdist's Producer
    """``--dist loadfile``, with the files that share cells in the checkout's csrc/ dealt as one unit each."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    units = csrc_units()

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return units.get(scope, scope)

        def _assign_work_unit(self, node) -> None:  # noqa: ANN001 - xdist's WorkerController
            queue = getattr(self, "workqueue", None)  # xdist's own: units in the order they are dealt
            if isinstance(queue, OrderedDict):
                for scope in reversed(LONGEST_FIRST):
                    if scope in queue:
                        queue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return Scheduling(config, log)
