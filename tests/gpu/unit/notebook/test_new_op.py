"""On a GPU: a brand-new op from a fresh IPython kernel to a shipped op that a new process dispatches.

Notebook 09's code cells run in a fresh kernel (declare gelu_tanh, build its %%cuda_jit row, verify it
in a child process, bench it, promote it into a scratch copy of the package). Then, in new processes
that import that copy: ``K.gelu_tanh`` dispatches to the promoted row, and ``tests/contract/test_rows.py``
verifies it. Nothing is written into the checkout.

    python -m pytest tests/gpu/unit/notebook/test_new_op.py -s
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu  # tests/conftest.py skips it, with the reason, where no CUDA device is visible

ROOT = Path(__file__).resolve().parents[4]
NOTEBOOK = ROOT / "notebooks" / "09_new_op.ipynb"


def _text(cell: dict) -> str:
    return "".join(o.get("text", "") or "".join(o.get("data", {}).get("text/plain", ""))
                   for o in cell.get("outputs", []))


def test_a_new_op_declared_in_a_kernel_ships_whole_and_a_new_process_dispatches_it(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbformat.v4 import new_code_cell

    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells = [c for c in nb.cells if c.cell_type == "code"]
    for cell in nb.cells:
        cell.outputs = []
    kept = tmp_path / "scratch"  # the notebook's last cell removes its scratch package: the test checks a copy
    last = next((i for i, c in enumerate(nb.cells) if "SCRATCH_DIR.cleanup()" in c.source), len(nb.cells))
    nb.cells[last:last] = [
        new_code_cell('report = verify("jit/gelu_fast", sanitize=("memcheck",), dtypes=["bf16"])\n'
                      'print("SANITIZED", report.passed, report.notes)'),
        new_code_cell(f"import shutil\nshutil.copytree(SCRATCH, {str(kept)!r}, symlinks=True)")]
    work = tmp_path / "work"  # no pyproject.toml above: the cell lands in work/csrc, not the checkout's
    work.mkdir()
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(work)}}).execute()
    texts = [_text(c) for c in nb.cells]
    everything = "\n".join(texts)
    assert "golden jit/gelu_fast vs native/gelu_tanh and the float64 oracle on cuda: PASS" in everything, everything
    assert "first run in a child process: passed" in everything, everything
    assert "added jit/gelu_tanh for op 'gelu_tanh'" in everything, everything
    assert (work / "csrc" / "gelu_tanh" / "gelu_fast.cu").is_file()
    sanitized = next(t for t in texts if t.startswith("SANITIZED"))
    assert sanitized.startswith("SANITIZED True") and "compute-sanitizer: memcheck passed" in sanitized, sanitized
    scratch = kept
    package = scratch / "rapid_llm"
    folder = package / "kernels" / "ops" / "gelu_tanh" / "gelu_tanh"
    assert {p.name for p in folder.iterdir()} >= {"__init__.py", "native.py", "reference.py", "gelu_tanh.cu"}
    assert not (ROOT / "rapid_llm" / "kernels" / "ops" / "gelu_tanh").exists()  # the checkout is untouched

    env = dict(os.environ, PYTHONPATH=str(scratch), RAPID_LLM_CACHE_DIR=str(tmp_path / "cache2"))
    code = ("import json, torch, rapid_llm.kernels as K\n"
            "x = torch.randn(1 << 20, device='cuda', dtype=torch.bfloat16)\n"
            "e = K.explain('gelu_tanh', x)\n"
            "y = K.gelu_tanh(x)\n"
            "ref = K.get_row('native/gelu_tanh').load()(x)\n"
            "print(json.dumps({'file': K.__file__, 'chosen': e.chosen.name, 'rows': [r.name for r in K.rows_for('gelu_tanh')],"
            " 'diff': (y.float() - ref.float()).abs().max().item(), 'text': str(e)}))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=scratch, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    fresh = json.loads(proc.stdout.strip().splitlines()[-1])
    print(fresh["text"])
    assert fresh["file"].startswith(str(scratch))
    assert fresh["rows"] == ["native/gelu_tanh", "jit/gelu_tanh"]
    assert fresh["chosen"] == "jit/gelu_tanh", fresh["text"]
    assert fresh["diff"] <= 0.0625, fresh  # bf16 values up to 4: one bf16 ulp there

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "tests" / "contract" / "test_rows.py"), "-k", "gelu_tanh", "-v",
         "-p", "no:cacheprovider", "--import-mode=append", f"--rootdir={ROOT}"],
        env=env, cwd=scratch, capture_output=True, text=True)
    print(tests.stdout[-3000:])
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    for test in ("test_row_passes_its_reference_and_holds_its_record", "test_row_handles_an_empty_input"):
        for row in ("native/gelu_tanh", "jit/gelu_tanh"):
            assert f"{test}[{row}] PASSED" in tests.stdout, tests.stdout[-3000:]
