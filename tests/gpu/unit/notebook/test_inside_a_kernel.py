"""On a GPU: a kernel's printf reaches the cell that ran it, and inspect() shows SASS beside the build facts.

    python -m pytest tests/gpu/unit/notebook/test_inside_a_kernel.py -s
"""
from __future__ import annotations

import re
import textwrap

import pytest
import torch

from rapid_llm.kernels.platform import cuda_tool
from tests.unit.notebook.conftest import shell  # noqa: F401 - named here too: one GPU machine's pytest missed the conftest's

pytestmark = pytest.mark.gpu  # tests/conftest.py skips it, with the reason, where no CUDA device is visible

PRINTF_CELL = textwrap.dedent("""\
    %%cuda_jit say_hello --group scratch
    #include "common/rapid_llm.cuh"
    #if RL_DEVICE
    __global__ void hello_kernel(int n) {
      if (threadIdx.x < n) printf("hello from thread %d\\n", static_cast<int>(threadIdx.x));
    }
    #endif
    #if RL_HOST
    __global__ void hello_kernel(int n);
    void say_hello(int64_t n) { rl::launch(hello_kernel, 1, 32, 0, static_cast<int>(n)); }
    RL_EXPORT(say_hello)
    #endif
""")


def test_a_kernel_printf_shows_in_the_cell_that_ran_it(tmp_path, monkeypatch):
    # ipykernel forwards file descriptor 1 to the cell except under pytest (it looks for this variable);
    # the kernel process inherits our environment, so it must not see it
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("import torch\ntorch.ones(1, device='cuda')\n%load_ext rapid_llm"),
                             new_code_cell(PRINTF_CELL),
                             new_code_cell("say_hello(3)"),
                             new_code_cell("print('next cell')")])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[2].outputs if o.get("output_type") == "stream")
    assert [line for line in text.splitlines() if line.startswith("hello")] == \
        [f"hello from thread {i}" for i in range(3)], nbformat.writes(nb)[-2000:]
    assert "hello" not in "".join(o.get("text", "") for o in nb.cells[3].outputs)


@pytest.mark.skipif(cuda_tool("cuobjdump") is None and cuda_tool("nvdisasm") is None,
                    reason="needs cuobjdump or nvdisasm (CUDA toolkit)")
def test_inspect_shows_sass_per_kernel_and_the_vector_loads():
    import rapid_llm.kernels as K

    report = K.inspect("jit/scale")
    print(report)
    vec = next((s for s, f in report.facts.items() if f.label.startswith("void scale_vec_kernel<float>")), None)
    assert vec is not None, f"no scale_vec_kernel<float> among the build facts:\n{report}"
    sass = report.code(vec, "sass")
    assert sass is not None and re.search(r"LDG\.E\.(\w+\.)*128", sass), (report.sass or "")[:2000]


@pytest.mark.skipif(cuda_tool("nvdisasm") is None, reason="needs nvdisasm (CUDA toolkit) for SASS with line info")
def test_sass_of_a_lineinfo_cell_names_the_cell_line_of_each_block(shell):
    import rapid_llm.kernels as K
    from rapid_llm.kernels.platform import PACKAGE_DIR

    naive = (PACKAGE_DIR.parent / "csrc" / "elementwise" / "scale_naive.cu").read_text()
    cell = naive.replace("scale_naive", "scale_lines")
    shell.run_cell_magic("cuda_jit", 'scale_lines --group elementwise --op scale --flags "-lineinfo"', cell)
    report = K.inspect("jit/scale_lines")
    symbol = next(s for s, f in report.facts.items() if f.label.startswith("void scale_kernel<float>"))
    sass = report.code(symbol, "sass")
    print(sass[:6000])
    store = 1 + next(i for i, line in enumerate(cell.splitlines(), 1) if "out[idx] =" in line)  # its cell line
    assert f"(cell line {store})" in sass, sass[:3000]
    assert re.search(r"STG\.E", sass)
