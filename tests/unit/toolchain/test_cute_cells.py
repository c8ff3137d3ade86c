"""cute_launcher without a GPU: a cell's @cute.kernel builds for sm_90a with a generated C launcher, loads again
from the cache without compiling, checks its arguments in C with the op's words, and refuses a kernel it cannot
launch; a verified cell row is promoted as one module of its op folder. Skipped where the CuTe DSL is not
installed. tests/gpu/unit/toolchain/test_cute_cells.py runs one.
"""
from __future__ import annotations

import importlib.util
import re
import sys
import textwrap

import pytest
import torch

from rapid_llm.kernels.toolchain import cute_support

pytestmark = pytest.mark.skipif(not cute_support.installed(),
                                reason=f"the CuTe DSL is not installed here: {cute_support.installed().reason}")

#: A cell's kernel, as a notebook would hold it (the DSL reads a kernel's source, so it lives in a file here).
SCALE = textwrap.dedent("""\
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int64


    @cute.kernel
    def scale_kernel(x: cute.Pointer, out: cute.Pointer, n: Int64, factor: Float32, BLOCK: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = Int64(bidx) * BLOCK + tidx
        gx = cute.make_tensor(x, cute.make_layout(n))
        go = cute.make_tensor(out, cute.make_layout(n))
        if i < n:
            go[i] = (Float32(gx[i]) * factor).to(out.dtype)
""")


@pytest.fixture
def cell(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    from rapid_llm.kernels.toolchain import cute_build

    monkeypatch.setattr(cute_build, "_LOADED", {})
    (tmp_path / "scale_cell.py").write_text(SCALE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "scale_cell", raising=False)
    import scale_cell

    return scale_cell


def test_a_cell_kernel_builds_with_a_generated_launcher_that_checks_in_c(cell, monkeypatch):
    from rapid_llm.kernels.toolchain import cute_build
    from rapid_llm.kernels.toolchain.cute_cells import cute_launcher

    run = cute_launcher(cell.scale_kernel, block=256, BLOCK=256)
    x = torch.randn(1000, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^scale_kernel: CUDA tensors only, got \[1000\] bf16 on cpu"):
        run(4, x, torch.empty_like(x), x.numel(), 2.0)  # built for bf16 first, then the launcher's check
    module, cached = cute_build.load(run.build([torch.bfloat16, torch.bfloat16]), "sm_90a")
    assert cached and module.__signatures__["launch"].kinds == "iiittif"

    monkeypatch.setattr(cute_build, "_LOADED", {})  # a new process: the same cell text finds its build
    monkeypatch.setattr(cute_build.CuteBuilder, "build", lambda *a: pytest.fail("rebuilt a cached entry"))
    again = cute_launcher(cell.scale_kernel, block=256, BLOCK=256)
    assert cute_build.load(again.build([torch.bfloat16, torch.bfloat16]), "sm_90a")[1]


def test_a_kernel_it_cannot_launch_is_refused_before_any_build(cell):
    from rapid_llm.kernels.toolchain.cute_cells import cute_launcher

    with pytest.raises(TypeError, match=r"give each Constexpr parameter once as a keyword \(missing: \['BLOCK'\]"):
        cute_launcher(cell.scale_kernel, block=256)
    run = cute_launcher(cell.scale_kernel, block=256, BLOCK=256)
    with pytest.raises(TypeError, match=r"^scale_kernel: takes the grid and 4 arguments, got 3"):
        run(1, torch.empty(4), torch.empty(4), 4)
    with pytest.raises(ValueError, match=r"^scale_kernel: no CuTe DSL type for torch.complex64"):
        run(1, torch.empty(4, dtype=torch.complex64), torch.empty(4, dtype=torch.complex64), 4, 1.0)


#: The launcher cells of a notebook's CuTe row of scale, below the kernel's cell.
LAUNCHER = textwrap.dedent("""\

    import torch
    from rapid_llm.kernels.toolchain.cute_cells import cute_launcher

    run = cute_launcher(scale_kernel, block=256, BLOCK=256)


    def scale_nb(input, factor, out=None):
        out = torch.empty_like(input) if out is None else out
        if input.numel():
            run((input.numel() + 255) // 256, input, out, input.numel(), factor)
        return out
""")


def test_a_verified_cell_row_ships_as_one_module_that_makes_its_kernel_and_launcher_again(tmp_path, monkeypatch):
    """Built first (the DSL then hands inspect the kernel without its decorator line, which promote writes back)."""
    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
    from rapid_llm.kernels.toolchain import cute_build, python_rows
    from rapid_llm.kernels.toolchain.promote import promote

    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cute_build, "_LOADED", {})
    (tmp_path / "scale_cells_nb.py").write_text(SCALE + LAUNCHER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "scale_cells_nb", raising=False)
    import scale_cells_nb as cells

    x = torch.randn(64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA tensors only"):
        cells.scale_nb(x, 2.0)  # compiled and built: what a notebook has done before verify
    package = tmp_path / "pkg"
    (package / "kernels" / "ops").mkdir(parents=True)
    with spec.isolated(discover=True):
        spec.register(KernelSpec(name="cute/scale_nb", op="scale", target=cells.scale_nb, devices=("cuda",),
                                 available="rapid_llm.kernels.toolchain.cute_support:available", min_sm=90,
                                 golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale")))
        done = promote("cute/scale_nb", package=package)
    text = done.path.read_text()
    assert done.path == package / "kernels/ops/elementwise/scale/scale_nb.py"
    assert python_rows.read_header(text.partition("\n")[0])["name"] == "cute/scale_nb"
    for line in ("@cute.kernel\ndef scale_kernel(", "def scale_nb(", "import cutlass\n",
                 "run = cute_launcher(scale_kernel, block=(256, 1, 1), BLOCK=256)",
                 "from rapid_llm.kernels.toolchain.cute_cells import cute_launcher"):
        assert line in text, line
    assert text.index("def scale_nb(") < text.index("run = cute_launcher(")
    found = importlib.util.spec_from_file_location("shipped_scale_nb", done.path)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)  # the kernel made again, and its launcher: the same source, the same build
    assert cute_build.load(module.run.build([torch.bfloat16, torch.bfloat16]), "sm_90a")[1]
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "fresh"))  # and the DSL compiles it from the module
    monkeypatch.setattr(cute_build, "_LOADED", {})
    assert not cute_build.load(module.run.build([torch.float16, torch.float16]), "sm_90a")[1]


def test_a_cell_kernel_that_does_not_compile_names_the_cells_line(tmp_path, monkeypatch):
    """In IPython the DSL reads the kernel from the cell, so its diagnostic names the cell and the line there."""
    InteractiveShell = pytest.importorskip("IPython.core.interactiveshell").InteractiveShell
    from rapid_llm.kernels.toolchain.cache import BuildError

    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    shell = InteractiveShell.instance()
    before = set(shell.user_ns)
    cells = ["import torch\nimport cutlass.cute as cute\nfrom cutlass import Float32, Int64\n"
             "from rapid_llm.kernels.toolchain.cute_cells import cute_launcher",
             "@cute.kernel\ndef bad_kernel(x: cute.Pointer, n: Int64):\n    tidx, _, _ = cute.arch.thread_idx()\n"
             "    if tidx < n:\n        j = tidx\n    cute.make_tensor(x, cute.make_layout(n))[j] = Float32(0.0)",
             "cute_launcher(bad_kernel, block=32)(1, torch.empty(8), 8)"]
    try:
        results = [shell.run_cell(cell) for cell in cells]
    finally:
        for name in set(shell.user_ns) - before:
            del shell.user_ns[name]
    assert [r.error_in_exec is None for r in results] == [True, True, False]
    error = results[-1].error_in_exec
    assert isinstance(error, BuildError) and re.search(r"--> <ipython-input-\d+-\w+>:6\n", str(error)), str(error)
