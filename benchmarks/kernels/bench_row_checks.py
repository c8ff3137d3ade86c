"""Host cost of a CUDA row's argument checks: each op's JIT row with its op's checks (as it ships) and without.

    python benchmarks/kernels/bench_row_checks.py [--numel 4096] [--dtype bf16] [--device cuda] [--rounds 5]

A JIT row's call path runs its op's checks (the floor's ``check``, rapid_llm.kernels.toolchain.jit_row.op_checks)
before it allocates out and launches: what makes a bad call get the floor's answer from a CUDA row too. This
times, per op, host-side (the harness's bench_host, arms interleaved round by round, median of the rounds'
medians): the row's call path as shipped, the same launcher behind fastcall's OutFirst without the checks, and
``K.<op>`` (which dispatches to whichever row its figures rank first). The difference of the first two is what
the checks cost per call. On a machine without CUDA the launcher is a no-op Python function, so the arms time
the checks and the binding alone.
"""
from __future__ import annotations

import argparse
import statistics
from typing import Any, Callable, Sequence

import torch

import rapid_llm.kernels as K
from rapid_llm.bench import bench_host
from rapid_llm.bench.ops import make_args
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.out_rules import OUT_RULES
from rapid_llm.kernels.toolchain.fastpath.binding import fastcall


def arms(op: str, device: torch.device) -> dict[str, Callable[..., Any]]:
    """The op's JIT row with its checks, the same without them, and K.<op>."""
    row = next(r for r in spec.rows_for(op) if r.backend == "jit")
    target = row.load()
    if device.type == "cuda":
        launcher = target.launcher()
        shipped = row.call_path()
    else:  # the checks and the binding alone: a launcher that does nothing
        def launcher(*args: Any) -> None:
            return None

        shipped = fastcall().OutFirst(launcher, target.fn, OUT_RULES[target.out], *_checks(target))
    bare = fastcall().OutFirst(launcher, target.fn, OUT_RULES[target.out], None, None, _checks(target)[2])
    return {"with checks": shipped, "without": bare, "K": getattr(K, op)}


def _checks(target: Any) -> tuple:
    from rapid_llm.kernels.toolchain.jit_row import op_checks

    return tuple(op_checks(target))


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
          f"{', ' + torch.cuda.get_device_name(device) if device.type == 'cuda' else ''})")
    print(f"{'op':20} {'with checks':>12} {'without':>9} {'checks':>8} {'K':>8}  K's row")
    for op in sorted(spec.all_ops()):
        if not any(r.backend == "jit" for r in spec.rows_for(op)):
            continue
        case = make_args(op, args.numel, dtype, device)
        fns = arms(op, device)
        for fn in fns.values():
            fn(*case.args, **case.kwargs)  # build, load and fill the dispatch cache: the steady state
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name].append(bench_host(fn, *case.args, n=args.n, rounds=3, warmup=50, **case.kwargs).median_us)
        med = {name: statistics.median(v) for name, v in times.items()}
        chosen = K.resolve(op, *[a for a in case.args if isinstance(a, torch.Tensor)]).name
        print(f"{op:20} {med['with checks']:12.2f} {med['without']:9.2f} {med['with checks'] - med['without']:8.2f} "
              f"{med['K']:8.2f}  {chosen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
