"""promote(), declaring an op from a notebook, and verification that survives a restart: for real, on CPU.

The JIT row here is a fast-path module whose launcher also runs on CPU
tensors (a host loop), so it can be built, verified and shipped without a GPU.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain import jit, jit_row
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification import remembered
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference, declare_op
from rapid_llm.kernels.toolchain.promote import PromoteError, promote
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                reason="the fast path needs g++ and the CUDA toolkit's headers (nvcc)")

CELL = r"""
#include "common/rapid_llm.cuh"
#if RL_HOST
void twice(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_same("twice", out, input);
  rl::dispatch<float, double>(input, "twice", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = input.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < input.numel(); ++i) o[i] = static_cast<T>(in[i] * factor * FACTOR2);
  });
}
RL_EXPORT(twice)
#endif
"""


def _native(x, factor, out=None):
    """x * factor * 2 in plain torch."""
    out = torch.empty_like(x) if out is None else out
    return torch.mul(x, 2 * factor, out=out)


def _call(fn, x, factor):
    out = torch.full_like(x, float("nan"))
    fn(x, factor, out=out)
    return out


def _make_inputs(shape, dtype, device, gen):
    return (torch.randn(shape, generator=gen).to(dtype=dtype, device=device), 1.5)


def _oracle(x, factor):
    return x.double() * factor * 2


REFERENCE = Reference(make_inputs=_make_inputs, oracle=_oracle, call=_call)


def _bench(numel, dtype, device):
    x = torch.randn(numel, device=device).to(dtype)
    return CaseArgs((x, 1.5), {"out": torch.empty_like(x)}, bytes_moved=2 * x.nbytes)


@pytest.fixture
def package(tmp_path):
    """A package folder to promote into, never the checkout: its kernels/ops/ and nothing else."""
    (tmp_path / "pkg" / "kernels" / "ops").mkdir(parents=True)
    return tmp_path / "pkg"


def _tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() + ("/" if p.is_dir() else "") for p in root.rglob("*"))


@pytest.fixture
def cell_row(tmp_path):
    """op 'twice' declared from a 'notebook' (its native function), and a verified-able JIT cell row."""
    declare_op("twice", native=_native, reference=REFERENCE, bench=_bench, dtypes=("fp32", "fp64"),
               devices=("cpu",))

    def make(wrong: str = "2.0", name: str = "twice_cell") -> str:
        src = tmp_path / "csrc" / "demo" / f"{name}.cu"
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(CELL.replace("FACTOR2", wrong))
        module = jit.build_jit(name, src, builder="fast").module
        target = jit_row.JitRow(src, "twice", launcher=module.twice, digest=jit_row.source_digest(src.read_text()))
        spec.register(KernelSpec(name=f"jit/{name}", op="twice", backend="jit", target=target, dtypes=("fp32", "fp64"),
                                 devices=("cpu",), golden=GoldenRecord(baseline="native/twice")), replace=True)
        return f"jit/{name}"

    return make


def test_an_op_declared_from_a_notebook_is_reachable_and_checkable(cell_row):
    x = torch.arange(4.0)
    assert K.twice(x, 1.5).tolist() == [0.0, 3.0, 6.0, 9.0]  # K.<op> exists once declared
    assert verify("native/twice").passed
    from rapid_llm.bench import bench_op

    assert {m.row for m in bench_op("twice", [256], dtypes=["fp32"], record=False, warmup=1, repeats=2,
                                    device="cpu")} == {
        "native/twice"}


def test_promote_ships_a_verified_cell_as_a_row_its_file_declares(cell_row, package):
    row = cell_row()
    with pytest.raises(PromoteError, match="golden-unverified; run verify"):
        promote(row, package=package)
    assert verify(row).passed
    done = promote(row, name="twice", package=package)
    assert done.row == "jit/twice" and done.path == package / "kernels" / "ops" / "demo" / "twice" / "twice.cu"
    assert "tests/contract/test_rows.py" in str(done)
    text = done.path.read_text()
    assert text.startswith(jit_row.HEADER_PREFIX) and text.count("RL_EXPORT(twice)") == 1
    shipped = spec.get_row("jit/twice")
    assert shipped.golden.verified and shipped.golden.baseline == "native/twice"
    # A fresh registry finds the row in the file alone, with its golden record.
    with spec.isolated():
        declare_op("twice", native=_native, reference=REFERENCE, bench=_bench, devices=("cpu",))
        (found,) = jit_row.register_cu_rows(package / "kernels" / "ops")
        assert found.name == "jit/twice" and found.golden == shipped.golden and found.target.fn == "twice"
    with pytest.raises(PromoteError, match="already exists; pass replace=True"):
        promote(row, name="twice", package=package)
    assert promote(row, name="twice", package=package, replace=True).replaced


def test_promote_refuses_what_cannot_ship(cell_row, tmp_path):
    with pytest.raises(PromoteError, match="only a JIT row built from a .cu source can ship"):
        promote("native/twice", package=tmp_path)
    row = cell_row(wrong="3.0")  # a wrong kernel: verify fails, so it never becomes shippable
    assert not verify(row).passed
    with pytest.raises(PromoteError, match="golden-unverified"):
        promote(row, package=tmp_path)
    row = cell_row()
    assert verify(row).passed
    src = spec.get_row(row).target.source
    src.write_text(src.read_text() + "// edited after verification\n")
    with pytest.raises(PromoteError, match="changed since it was built and verified"):
        promote(row, package=tmp_path)


def test_a_passing_verification_is_remembered_by_source_digest(cell_row):
    row = cell_row()
    digest = spec.get_row(row).target.digest
    report = verify(row)
    recalled = remembered.recall_verification(digest, spec.get_row(row).op)
    assert recalled is not None and recalled.verified and recalled.max_abs_diff == report.record.max_abs_diff


def test_a_cu_row_of_an_undeclared_op_is_not_registered(tmp_path):
    src = tmp_path / "csrc" / "orphans" / "orphan" / "orphan.cu"
    src.parent.mkdir(parents=True)
    src.write_text(jit_row.write_header(CELL, {"name": "jit/orphan", "op": "no_such_op", "fn": "twice"}))
    with pytest.warns(RuntimeWarning, match="serves op 'no_such_op', which no op group declares"):
        assert jit_row.register_cu_rows(tmp_path / "csrc") == []
    with pytest.raises(spec.RegistryError):
        spec.get_row("jit/orphan")


def test_promote_ships_a_notebook_op_whole_and_a_new_process_finds_it(cell_row, tmp_path):
    """The op's declaration is written beside its row; a fresh interpreter importing that package has both."""
    import os
    import subprocess
    import sys

    row = cell_row()
    assert verify(row).passed
    package = tmp_path / "root" / "rapid_llm"
    shutil.copytree(Path(K.__file__).resolve().parent.parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    done = promote(row, name="twice", package=package)
    assert done.declaration == package / "kernels" / "ops" / "demo" / "twice" / "__init__.py"
    assert "declared in" in str(done)
    code = ("import torch, rapid_llm.kernels as K; print(K.__file__); print(sorted(r.name for r in K.rows_for('twice'))); "
            "print(K.twice(torch.arange(3.0), 1.5).tolist())")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(tmp_path / "root")),
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    file, rows, values = proc.stdout.strip().splitlines()
    assert file.startswith(str(package)) and rows == "['jit/twice', 'native/twice']" and values == "[0.0, 3.0, 6.0]"


def test_promote_refuses_an_op_it_cannot_write_out_and_writes_nothing(tmp_path, package):
    declare_op("thrice", native=lambda x, factor, out=None: x * 3 * factor, reference=REFERENCE, bench=_bench,
               devices=("cpu",))
    src = tmp_path / "csrc" / "demo" / "thrice_cell.cu"
    src.parent.mkdir(parents=True)
    src.write_text(CELL.replace("FACTOR2", "1.5"))
    module = jit.build_jit("thrice_cell", src, builder="fast").module
    target = jit_row.JitRow(src, "twice", launcher=module.twice, digest=jit_row.source_digest(src.read_text()))
    spec.register(KernelSpec(name="jit/thrice_cell", op="thrice", backend="jit", target=target, dtypes=("fp32",),
                             devices=("cpu",), golden=GoldenRecord(verified=True, max_abs_diff=0.0,
                                                                   baseline="native/thrice")))
    with pytest.raises(spec.RegistryError, match="the native floor is a lambda"):
        promote("jit/thrice_cell", package=package)
    assert _tree(package) == ["kernels/", "kernels/ops/"]


def test_a_promoted_op_has_the_folder_shape_of_a_shipped_one(cell_row, package):
    """promote() writes an op folder as the library's are written by hand: the group, one folder per op with
    __init__.py (DECLARATION), native.py, reference.py and the .cu row; nothing else anywhere."""
    from rapid_llm.kernels import platform

    row = cell_row()
    assert verify(row).passed
    done = promote(row, name="twice", package=package)
    folder = package / "kernels" / "ops" / "demo" / "twice"
    written = sorted(p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file())
    assert written == ["kernels/ops/demo/__init__.py", "kernels/ops/demo/twice/__init__.py",
                       "kernels/ops/demo/twice/native.py", "kernels/ops/demo/twice/reference.py",
                       "kernels/ops/demo/twice/twice.cu"]
    assert done.path.parent == folder and platform.op_folders(package / "kernels" / "ops") == [folder]
    # Every shipped op folder has the same files: the declaration, the floor, the reference, its .cu rows.
    shipped = platform.op_folders()
    assert len(shipped) == len([op for op in spec.all_ops() if spec.is_library_decl(op)])
    for op_folder in (*shipped, folder):
        names = {p.name for p in op_folder.iterdir() if p.name != "__pycache__"}
        assert {"__init__.py", "native.py", "reference.py", f"{op_folder.name}.cu"} <= names, (op_folder, names)
        assert "DECLARATION = define_op(" in (op_folder / "__init__.py").read_text(), op_folder
    init = (folder / "__init__.py").read_text()
    assert "from rapid_llm.kernels.ops.demo.twice.native import _native" in init
    assert "from rapid_llm.kernels.ops.demo.twice.reference import" in init


def _double_scale(input, factor, out=None):
    """A notebook's scale that doubles: input * factor * 2."""
    result = input * (2.0 * factor)
    return result if out is None else out.copy_(result)


def _double_oracle(x, factor):
    return x.double() * float(factor) * 2.0


def test_promote_refuses_a_row_verified_against_a_shadow_of_a_library_op(tmp_path, package):
    """A notebook shadows 'scale' with a doubling floor and verifies a doubling cell against it. Shipped as a 'scale'
    row it would double for every caller of the library's scale: promote refuses, naming the op and the ways on."""
    from rapid_llm.kernels.ops.elementwise.scale import reference as scale_reference

    double = Reference(make_inputs=scale_reference.make_inputs, oracle=_double_oracle, call=scale_reference.call)
    declare_op("scale", native=_double_scale, reference=double, bench=scale_reference.bench_case,
               dtypes=("fp32", "fp64"), devices=("cpu",), shadow_library=True)
    src = tmp_path / "csrc" / "elementwise" / "scale_double.cu"
    src.parent.mkdir(parents=True)
    src.write_text(CELL.replace("FACTOR2", "2.0"))
    module = jit.build_jit("scale_double", src, builder="fast").module
    target = jit_row.JitRow(src, "twice", launcher=module.twice, digest=jit_row.source_digest(src.read_text()))
    row = "jit/scale_double"
    spec.register(KernelSpec(name=row, op="scale", backend="jit", target=target, dtypes=("fp32", "fp64"),
                             devices=("cpu",), golden=GoldenRecord(baseline="native/scale")))
    assert verify(row).passed  # against the shadow (its verify child declares the shadow too)
    with pytest.raises(PromoteError, match=r"op 'scale' is the library's, but this process shadows it .*"
                                           r"restore_op\('scale'\), verify\('jit/scale_double'\) again, then promote"
                                           r".*declare it under a new name"):
        promote(row, package=package)
    assert _tree(package) == ["kernels/", "kernels/ops/"]
    assert K.restore_op("scale") == [row]  # back to the library's scale; the row stays, unverified
    with pytest.raises(PromoteError, match="golden-unverified"):
        promote(row, package=package)
    assert not verify(row).passed  # against the library's scale it doubles
    assert _tree(package) == ["kernels/", "kernels/ops/"]


def test_promote_refuses_a_folder_that_is_not_a_package(cell_row, tmp_path):
    row = cell_row()
    spec.update_golden(row, GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/twice"))
    with pytest.raises(PromoteError, match=r"rapid_llm/kernels is not a rapid_llm package folder \(it has no "
                                           r"kernels/ops/\)"):
        promote(row, package=tmp_path / "rapid_llm" / "kernels")
    assert not (tmp_path / "rapid_llm").exists()


def test_a_tuned_cell_ships_with_its_pins(cell_row, package, tmp_path, monkeypatch):
    """A cell that declares a space and was tuned (a pin in the local store) is promoted with that pin, keyed by the
    shipped file's digest in the op folder's tuned/, so the shipped row builds the same variant."""
    from rapid_llm.kernels.registry import pins

    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    row = cell_row()
    source = spec.get_row(row).target.source
    source.write_text('// rapid_llm tune: {"UNROLL": [1, 2]}\n' + source.read_text())
    target = spec.get_row(row).target
    module = jit.build_jit("twice_cell", source, builder="fast").module
    spec.register(dataclasses.replace(spec.get_row(row), target=jit_row.JitRow(
        source, "twice", launcher=module.twice, digest=jit_row.source_digest(source.read_text()))), replace=True)
    assert verify(row).passed
    kind = pins.current_kind()
    pins.pin(source, "twice", row, target.untuned_digest(), kind, {"UNROLL": 2}, tuned_us=1.0, untuned_us=2.0)
    done = promote(row, name="twice", package=package)
    table = done.path.parent / "tuned" / f"{platform.slug(kind)}.json"
    shipped = spec.get_row("jit/twice").target
    entry = json.loads(table.read_text())["pins"][shipped.untuned_digest()]
    assert entry["config"] == {"UNROLL": 2} and entry["row"] == "jit/twice" and entry["untuned_us"] == 2.0
