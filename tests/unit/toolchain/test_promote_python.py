"""promote() of a notebook's Gluon row on CPU: the folder it writes and the row the registry reads back.

Gluon has no CPU interpreter, so the row is never run here (tests/gpu/ops/test_rms_norm.py runs the shipped
one); its golden record is set as a passing verify on a GPU would set it.
"""
from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain import gluon_support, python_rows
from rapid_llm.kernels.toolchain.promote import PromoteError, promote

pytest.importorskip("triton.experimental.gluon")

#: A notebook's cells, as a module of its own (opsource copies a function of a module that is not installed).
CELL = textwrap.dedent('''
    import torch
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    from rapid_llm.kernels.ops.norm.rms_norm.native import check

    VEC = gl.constexpr(8)  # a kernel reads only constexpr globals
    WARPS = 4


    @gluon.jit
    def cell_rms_kernel(x_ptr, w_ptr, out_ptr, hidden, eps, BLOCK: gl.constexpr, NUM_WARPS: gl.constexpr):
        layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [NUM_WARPS], [0])
        row = gl.program_id(0).to(gl.int64)
        cols = gl.arange(0, BLOCK, layout=layout)
        mask = cols < hidden
        x = gl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0).to(gl.float32)
        inv = 1.0 / gl.sqrt_rn(gl.sum(x * x, axis=0) / hidden + eps)
        w = gl.load(w_ptr + cols, mask=mask, other=0.0).to(gl.float32)
        gl.store(out_ptr + row * hidden + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


    def rms_norm_cell(x, weight, eps, out=None):
        check(x, weight, eps, out)
        out = torch.empty_like(x) if out is None else out
        hidden = x.shape[-1]
        block = max(triton.next_power_of_2(hidden), 8 * 32 * WARPS)
        cell_rms_kernel[(x.numel() // hidden,)](x, weight, out, hidden, eps, BLOCK=block, NUM_WARPS=WARPS,
                                                    num_warps=WARPS)
        return out
''')


@pytest.fixture
def launcher(tmp_path):
    path = tmp_path / "gluon_cells_nb.py"
    path.write_text(CELL)
    found = importlib.util.spec_from_file_location("gluon_cells_nb", path)
    module = importlib.util.module_from_spec(found)
    sys.modules["gluon_cells_nb"] = module
    try:
        found.loader.exec_module(module)
        yield module.rms_norm_cell
    finally:
        del sys.modules["gluon_cells_nb"]


@pytest.fixture
def package(tmp_path):
    (tmp_path / "pkg" / "kernels" / "ops").mkdir(parents=True)
    return tmp_path / "pkg"


def _row(launcher, verified=True) -> KernelSpec:
    golden = GoldenRecord(verified=verified, max_abs_diff=0.0625 if verified else None, baseline="native/rms_norm")
    return KernelSpec(name="gluon/rms_norm_cell", op="rms_norm", target=launcher,
                      available="rapid_llm.kernels.toolchain.gluon_support:available", devices=("cuda",),
                      golden=golden, min_sm=90)


def test_a_verified_gluon_row_ships_as_one_module_that_declares_itself(launcher, package):
    with spec.isolated(discover=True):
        spec.register(_row(launcher))
        done = promote("gluon/rms_norm_cell", package=package)
        assert (done.row, done.path, done.declaration) == (
            "gluon/rms_norm_cell", package / "kernels/ops/norm/rms_norm/rms_norm_cell.py", None)
        written = sorted(p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file())
        assert written == ["kernels/ops/norm/rms_norm/rms_norm_cell.py"]  # the library declares rms_norm
        text = done.path.read_text()
        fields = python_rows.read_header(text.partition("\n")[0])
        assert fields["fn"] == "rms_norm_cell" and fields["golden"]["verified"] and fields["min_sm"] == 90
        for line in ("@gluon.jit", "def cell_rms_kernel(", "def rms_norm_cell(", "VEC = tl.constexpr(8)", "WARPS = 4",
                     "from rapid_llm.kernels.ops.norm.rms_norm.native import check",
                     "import triton.experimental.gluon.language as gl"):
            assert line in text, line
        assert text.index("def cell_rms_kernel(") < text.index("def rms_norm_cell(")  # defined before it is used
        row = spec.get_row("gluon/rms_norm_cell")
        assert row.backend == "gluon" and row.golden.verified and row.target is launcher


def test_the_registry_reads_the_shipped_module_back_without_importing_it(launcher, package):
    with spec.isolated(discover=True):
        spec.register(_row(launcher))
        done = promote("gluon/rms_norm_cell", name="rms_norm_g2", package=package)
        spec.unregister("gluon/rms_norm_g2")
        (row,) = python_rows.register_py_rows(package / "kernels" / "ops")
        assert row.name == "gluon/rms_norm_g2" and row.target == "rapid_llm.kernels.ops.norm.rms_norm.rms_norm_g2:rms_norm_cell"
        assert row.devices == ("cuda",) and row.golden.max_abs_diff == 0.0625
        assert row.probe("cpu").reason in (gluon_support.NO_INTERPRETER, gluon_support.installed().reason)
        compile(done.path.read_text(), str(done.path), "exec")
        # the module, imported under its own name from the copy, makes the kernel again
        found = importlib.util.spec_from_file_location("shipped_rms_norm_g2", done.path)
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        assert module.cell_rms_kernel.is_gluon() and callable(module.rms_norm_cell)


def test_promote_refuses_what_cannot_ship(launcher, package):
    with spec.isolated(discover=True):
        spec.register(_row(launcher, verified=False))
        with pytest.raises(PromoteError, match="golden-unverified"):
            promote("gluon/rms_norm_cell", package=package)
        spec.register(_row(launcher), replace=True)
        with pytest.raises(PromoteError, match="native.py is a module every op folder"):
            promote("gluon/rms_norm_cell", name="native", package=package)
        with pytest.raises(PromoteError, match="launcher, a function defined in the notebook"):
            promote("gluon/rms_norm", package=package)  # the shipped row: its module is edited, not promoted
        assert not any(package.rglob("*.py"))
