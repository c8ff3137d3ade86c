"""Host-side cost of dispatch: rapid_llm.kernels.scale(x, f) against calling the chosen row directly.

    python benchmarks/kernels/bench_dispatch_overhead.py [--numel 1024] [--device cuda]

Both calls allocate their output and run on the same device and tensor; the
difference is what the dispatching op adds per call (a dict lookup on dtype,
device and size class). Times are host-side, from the harness's bench_host.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from typing import Sequence

import torch

import rapid_llm.kernels as K
from rapid_llm.bench import bench_host
from rapid_llm.kernels.dispatch import resolve


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numel", type=int, default=1024)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--n", type=int, default=2000, help="calls per timed round")
    parser.add_argument("--pairs", type=int, default=5, help="interleaved (dispatch, direct) measurements")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    x = torch.randn(args.numel, device=device).to(dtype)
    row = resolve("scale", x)
    direct = row.load()
    op = K.scale
    op(x, 2.0)  # fill the dispatch cache: the steady state is what a model sees
    # Interleave the two arms so drift in the machine's state hits both alike.
    via_op, via_row = [], []
    for _ in range(args.pairs):
        via_op.append(bench_host(op, x, 2.0, n=args.n, label="rapid_llm.kernels.scale"))
        via_row.append(bench_host(direct, x, 2.0, n=args.n, label=row.name))
    op_us = statistics.median(r.median_us for r in via_op)
    row_us = statistics.median(r.median_us for r in via_row)
    print(f"scale, {args.numel} {args.dtype} elements on {via_op[0].device}; chosen row {row.name}")
    print(f"  through dispatch : {op_us:7.2f} us/call (per pair: {', '.join(f'{r.median_us:.2f}' for r in via_op)})")
    print(f"  row called direct: {row_us:7.2f} us/call (per pair: {', '.join(f'{r.median_us:.2f}' for r in via_row)})")
    print(f"  dispatch adds    : {op_us - row_us:7.2f} us/call (median of {args.pairs} interleaved pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
