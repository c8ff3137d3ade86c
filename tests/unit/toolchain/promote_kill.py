"""Run by test_promote_kill.py, in a process of its own: promote() killed with SIGKILL after each of its steps.

``python -m tests.unit.toolchain.promote_kill FOLDER MODE`` copies the package to FOLDER/root/rapid_llm and
ships a notebook op's cell row into it: MODE ``new`` (the op and its group are new: five files, two new
folders) or ``replace`` (the row's source replaced, ``replace=True``). After each kill it prints one JSON
object: the tree after ``op_writes.recover`` (the old one?), then after a promote (the new one?), and whether a
promote run straight after a second kill at that step (recovering first) gives the new tree. With ``new``, a
fresh interpreter importing the copy after a kill half-way shows the reader's own recovery.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.registry import op_writes, spec
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference, declare_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain import jit_row
from rapid_llm.kernels.toolchain.promote import promote
from tests.kill_steps import empty_folders, killed_at, leftovers, snapshot, steps_of

CELL = """#include "common/rapid_llm.cuh"
// VERSION
#if RL_HOST
void twice(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_same("twice", out, input);
  rl::dispatch<float>(input, "twice", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < input.numel(); ++i) out.data<T>()[i] = static_cast<T>(input.data<T>()[i] * factor * 2);
  });
}
RL_EXPORT(twice)
#endif
"""


def twice_native(x, factor, out=None):
    """x * factor * 2 in plain torch."""
    out = torch.empty_like(x) if out is None else out
    return torch.mul(x, 2 * factor, out=out)


def twice_inputs(shape, dtype, device, gen):
    return (torch.randn(shape, generator=gen).to(dtype=dtype, device=device), 1.5)


def twice_oracle(x, factor):
    return x.double() * factor * 2


def twice_bench(numel, dtype, device):
    x = torch.randn(numel, device=device).to(dtype)
    return CaseArgs((x, 1.5), {"out": torch.empty_like(x)}, bytes_moved=2 * x.nbytes)


def _not_run(*args):
    raise AssertionError("promote never calls the launcher")


def cell_row(source: Path, version: str) -> str:
    """The cell's row as %%cuda_jit registers it, verified (promote reads the record, it does not verify)."""
    source.write_text(CELL.replace("VERSION", version))
    target = jit_row.JitRow(source, "twice", launcher=_not_run, digest=jit_row.source_digest(source.read_text()))
    spec.register(KernelSpec(name="jit/twice_cell", op="twice", target=target, dtypes=("fp32",), devices=("cpu",),
                             golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/twice")),
                  replace=True)
    return "jit/twice_cell"


def reader_sees(root: Path) -> list[str]:
    """What a fresh interpreter importing the package copy reports: its file, and whether op 'twice' exists."""
    code = "import rapid_llm.kernels as K; print(K.__file__); print('twice' in K.all_ops())"
    env = dict(os.environ, PYTHONPATH=str(root / "root"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    return proc.stdout.split() if proc.returncode == 0 else ["failed", proc.stderr[-2000:]]


def main(root: Path, mode: str) -> None:
    package = root / "root" / "rapid_llm"
    shutil.copytree(Path(K.__file__).resolve().parent.parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    ops = package / "kernels" / "ops"
    declare_op("twice", native=twice_native, reference=Reference(make_inputs=twice_inputs, oracle=twice_oracle),
               bench=twice_bench, dtypes=("fp32",), devices=("cpu",))
    source = root / "csrc" / "demo" / "twice_cell.cu"
    source.parent.mkdir(parents=True)
    row = cell_row(source, "first")
    if mode == "replace":
        promote(row, name="twice", package=package)
        spec.unregister("jit/twice")
        row = cell_row(source, "second")

    def run(replace: bool = mode == "replace") -> None:
        promote(row, name="twice", replace=replace, package=package)
        spec.unregister("jit/twice")  # as before the promote: the next one starts from the same registry

    pristine = root / "pristine_ops"
    shutil.copytree(ops, pristine)
    old = snapshot(package)
    steps = steps_of(run)
    new = snapshot(package)

    def reset() -> None:
        shutil.rmtree(ops)
        shutil.copytree(pristine, ops)

    for k, step in enumerate(steps, 1):
        reset()
        killed = killed_at(k, run)
        pending = op_writes.pending(ops)
        start = time.perf_counter()
        op_writes.recover(ops)
        seconds = time.perf_counter() - start
        tree = snapshot(package)
        report = {"step": step, "killed": killed, "pending": pending, "seconds": seconds, "old": tree == old,
                  "new": tree == new, "empty": empty_folders(package), "leftovers": leftovers(package)}
        done = report["new"]  # killed after its commit: done, so the re-run replaces it (else it says it exists)
        run(replace=done or mode == "replace")
        report["rerun_new"] = snapshot(package) == new
        reset()
        killed_at(k, run)
        run(replace=done or mode == "replace")  # recovers first
        report["promote_recovers"] = snapshot(package) == new and leftovers(package) == []
        print(json.dumps(report), flush=True)
    if mode == "new":
        reset()
        middle = steps.index(next(s for s in steps if s.endswith("/__init__.py written")))
        killed_at(middle + 1, run)
        pending = op_writes.pending(ops)
        seen = reader_sees(root)
        print(json.dumps({"reader": seen, "step": steps[middle], "pending": pending, "old": snapshot(package) == old,
                          "empty": empty_folders(package), "leftovers": leftovers(package)}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
