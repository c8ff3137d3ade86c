"""Host-side cost of dispatch: rapid_llm.kernels.scale(x, f) against the chosen row and torch.mul.

    python benchmarks/kernels/bench_dispatch_overhead.py [--numel 1024] [--device cuda] [--against DIR]

All four calls allocate their output and run on the same device and tensor:
the dispatching op, the row it chose called directly, the native floor row
called directly, and the plain ``torch.mul(x, f)`` the op replaces. The first minus the second is what
dispatch adds per call; the first against the third is what a caller pays
for using the op at all. Times are host-side, from the harness's bench_host,
interleaved so machine drift hits all of them alike.

``--against DIR`` adds a fifth arm: ``scale`` from another revision of the
package (DIR holds its ``rapid_llm`` folder, e.g. from
``git archive REV rapid_llm | tar -x -C DIR``), imported beside this one under
another name, so a refactor's per-call cost is compared in one process.
"""
from __future__ import annotations

import argparse
import importlib
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

import rapid_llm.kernels as K
from rapid_llm.bench import bench_host
from rapid_llm.kernels.dispatch.dispatcher import resolve


def import_other_revision(tree: Path, alias: str = "rapid_llm_prev") -> Any:
    """``rapid_llm.kernels`` of the package under ``tree``, imported as ``<alias>.kernels``.

    The copy's modules name their package as ``alias`` wherever they name a module (``rapid_llm.`` and
    ``import rapid_llm``, in code and in string references alike), so the two revisions share no module.
    Other text keeps its words: the runtime's header names (``rapid_llm.cuh``), the ``// rapid_llm row:`` line its shipped .cu rows are found by, and the
    custom-op namespace (whose ops this revision defined first: the other one's stay eager, which is all a
    per-call figure needs).
    """
    src = tree / "rapid_llm"
    if not (src / "__init__.py").is_file():
        raise SystemExit(f"--against {tree}: no rapid_llm package there (expected {src}/__init__.py)")
    root = Path(tempfile.mkdtemp(prefix="rapid_llm_other_"))
    dst = root / alias
    shutil.copytree(src, dst)
    # rapid_llm.<name> names a module; rapid_llm.cuh and rapid_llm.h name the .cu runtime's headers (files).
    word = re.compile(r"\brapid_llm(?=\.(?!cuh?\b|h\b))|(?<=import )rapid_llm\b|(?<=from )rapid_llm\b")
    for path in dst.rglob("*.py"):
        path.write_text(word.sub(alias, path.read_text()))
    sys.path.insert(0, str(root))
    return importlib.import_module(f"{alias}.kernels")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numel", type=int, default=1024)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--n", type=int, default=500, help="calls per timed round (few enough that the launch "
                        "queue never fills: a full queue times the GPU, not the host)")
    parser.add_argument("--pairs", type=int, default=15, help="interleaved (dispatch, direct) measurements")
    parser.add_argument("--against", type=Path, help="a folder holding another revision's rapid_llm package")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    x = torch.randn(args.numel, device=device).to(dtype)
    row = resolve("scale", x)
    direct = row.call_path()
    op = K.scale
    op(x, 2.0)  # fill the dispatch cache: the steady state is what a model sees
    # Interleave the two arms so drift in the machine's state hits both alike.
    native = K.get_row("native/scale").call_path()
    other: Callable[..., Any] | None = None
    other_row = ""
    if args.against is not None:
        other_kernels = import_other_revision(args.against)
        other = other_kernels.scale
        other(x, 2.0)
        other_row = other_kernels.resolve("scale", x).name
        if other_row != row.name:  # not like for like: say why the other revision chose another row
            print(f"--against chose {other_row}, this revision {row.name}:\n{other_kernels.explain('scale', x)}")
    via_op, via_row, via_native, via_torch, via_other = [], [], [], [], []
    for _ in range(args.pairs):
        via_op.append(bench_host(op, x, 2.0, n=args.n, label="rapid_llm.kernels.scale"))
        via_row.append(bench_host(direct, x, 2.0, n=args.n, label=row.name))
        via_native.append(bench_host(native, x, 2.0, n=args.n, label="native/scale"))
        via_torch.append(bench_host(torch.mul, x, 2.0, n=args.n, label="torch.mul"))
        if other is not None:
            via_other.append(bench_host(other, x, 2.0, n=args.n, label="scale at --against"))
    op_us = statistics.median(r.median_us for r in via_op)
    row_us = statistics.median(r.median_us for r in via_row)
    native_us = statistics.median(r.median_us for r in via_native)
    torch_us = statistics.median(r.median_us for r in via_torch)
    print(f"scale, {args.numel} {args.dtype} elements on {via_op[0].device}; chosen row {row.name}")
    for label, us, runs in (("through dispatch ", op_us, via_op), ("row called direct", row_us, via_row),
                            ("native/scale row ", native_us, via_native), ("torch.mul        ", torch_us, via_torch)):
        print(f"  {label}: {us:7.2f} us/call (per round: {', '.join(f'{r.median_us:.2f}' for r in runs)})")
    adds = statistics.median(a.median_us - b.median_us for a, b in zip(via_op, via_row))
    print(f"  dispatch adds    : {adds:7.2f} us/call (median over {args.pairs} interleaved rounds of "
          "dispatch minus row in the same round)")
    print(f"  op / torch.mul   : {op_us / torch_us:7.2f}x")
    print(f"  native / torch   : {native_us / torch_us:7.2f}x (the floor's own per-call path)")
    if via_other:
        other_us = statistics.median(r.median_us for r in via_other)
        delta = statistics.median(a.median_us - b.median_us for a, b in zip(via_op, via_other))
        print(f"  --against scale  : {other_us:7.2f} us/call (per round: "
              f"{', '.join(f'{r.median_us:.2f}' for r in via_other)}); {args.against}, chosen row {other_row}")
        print(f"  this - --against : {delta:+7.2f} us/call (median of same-round differences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
