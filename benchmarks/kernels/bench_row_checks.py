"""Host cost of a CUDA row's argument checks: each op's JIT row with its op's checks (as it ships) and without.

    python benchmarks/kernels/bench_row_checks.py [--numel 4096] [--dtype bf16] [--device cuda|cpu] [--rounds 5]

A JIT row's call path runs its op's checks (the floor's ``check``, rapid_llm.kernels.toolchain.jit_row.op_checks)
before it allocates out and launches: what makes a bad call get the floor's answer from a CUDA row too. This
times, per op, host-side (the harness's bench_host, arms interleaved round by round, median of the rounds'
medians): the row's call path as shipped, the same launcher behind fastcall's OutFirst without the checks, and
``K.<op>`` (which dispatches to whichever row its figures rank first). The difference of the first two is what
the checks cost per call: a call like one that passed them is not checked again
(rapid_llm/kernels/dispatch/fastcall_checked.inc), so in this steady state it is the cost of telling so.

On CPU (``--device cpu``, the default without CUDA) each JIT row gets a CPU twin: a JitRow of the same source,
launcher name and out rule whose launcher does nothing, registered first in rank for CPU tensors. So the three
arms run a JIT row's whole call path (K's dispatch, the op's checks, out allocated in C) on CPU tensors, and time
the host work alone. The tables kept: benchmarks/results/logs/row_checks_{cpu,nvidia_h100}.log, the GPU one from

    python benchmarks/kernels/bench_row_checks.py --device cuda --rounds 5 \
        > benchmarks/results/logs/row_checks_nvidia_h100.log
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
from typing import Any, Callable, Iterator, Sequence

import torch

import rapid_llm.kernels as K
from rapid_llm.bench import bench_host
from rapid_llm.bench.ops import make_args
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.check_marks import values_read_on
from rapid_llm.kernels.registry.out_rules import OUT_RULES
from rapid_llm.kernels.toolchain.fastpath.binding import fastcall
from rapid_llm.kernels.toolchain.jit_row import JitRow, op_checks


def jit_rows(device: torch.device) -> dict[str, spec.KernelSpec]:
    """The op -> JIT row timed: the shipped row on CUDA; on CPU its twin (:func:`cpu_twins`, entered first)."""
    found = {}
    for op in sorted(spec.all_ops()):
        for row in spec.rows_for(op):
            if row.backend == "jit" and isinstance(row.target, JitRow) and device.type in row.devices:
                found.setdefault(op, row)
    return found


@contextlib.contextmanager
def cpu_twins() -> Iterator[None]:
    """Every shipped JIT row's CPU twin (a launcher that does nothing), registered verified and first in rank for
    CPU tensors while the block runs."""
    def launcher(*args: Any) -> None:
        return None

    names = []
    try:
        for op, row in jit_rows(torch.device("cuda")).items():
            twin = JitRow(row.target.source, row.target.fn, out=row.target.out, launcher=launcher)
            spec.register(dataclasses.replace(row, name=f"jit/cpu_twin_of_{op}", target=twin, devices=("cpu",),
                                              available=None, golden=spec.GoldenRecord(verified=True), priority=1e9))
            names.append(f"jit/cpu_twin_of_{op}")
        yield
    finally:
        for name in names:
            spec.unregister(name)


def arms(row: spec.KernelSpec) -> dict[str, Callable[..., Any]]:
    """The row's call path with its checks, the same launcher without them, and K.<op>."""
    target = row.load()
    shipped = row.call_path()
    bare = fastcall().OutFirst(target.launcher(), target.fn, OUT_RULES[target.out], None, None,
                               op_checks(target).out_at)
    return {"with checks": shipped, "without": bare, "K": getattr(K, row.op)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numel", type=int, default=4096, help="elements of each op's bench case (4096: one token)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of every arm")
    parser.add_argument("--n", type=int, default=500, help="calls per timed round of bench_host")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    print(f"host us per call, {args.dtype}, numel {args.numel}, on {device} (torch {torch.__version__}"
          f"{', ' + torch.cuda.get_device_name(device) if device.type == 'cuda' else ', JIT rows CPU twins'})")
    print(f"{'op':20} {'with checks':>12} {'without':>9} {'checks':>8} {'K':>8}  K's row")
    marked = False
    with cpu_twins() if device.type == "cpu" else contextlib.nullcontext():
        for op, row in jit_rows(device).items():
            case = make_args(op, args.numel, dtype, device)
            fns = arms(row)
            for fn in fns.values():
                fn(*case.args, **case.kwargs)  # build, load and fill the dispatch cache: the steady state
            times: dict[str, list[float]] = {name: [] for name in fns}
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    times[name].append(bench_host(fn, *case.args, n=args.n, rounds=3, warmup=50,
                                                  **case.kwargs).median_us)
            med = {name: statistics.median(v) for name, v in times.items()}
            chosen = K.resolve(op, *[a for a in case.args if isinstance(a, torch.Tensor)]).name
            every = device.type in values_read_on(op_checks(row.load()).check)
            print(f"{op:20} {med['with checks']:12.2f} {med['without']:9.2f} "
                  f"{med['with checks'] - med['without']:8.2f} {med['K']:8.2f}  {chosen}{' *' if every else ''}")
            marked = marked or every
    if marked:
        print(f"* its check reads tensor values on {device.type} (registry.check_marks), so every call there runs it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
