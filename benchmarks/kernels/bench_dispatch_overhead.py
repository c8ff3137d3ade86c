"""Host-side cost of dispatch: rapid_llm.kernels.scale(x, f) against calling the chosen row directly.

    python benchmarks/kernels/bench_dispatch_overhead.py [--numel 1024] [--device cuda]

Both calls allocate their output and run on the same device and tensor; the
difference is what the dispatching op adds per call (a dict lookup on dtype,
device and size class). Times are host-side, from the harness's bench_host.
"""
from __future__ import annotations

import argparse
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
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    x = torch.randn(args.numel, device=device).to(dtype)
    row = resolve("scale", x)
    direct = row.load()
    op = K.scale
    op(x, 2.0)  # fill the dispatch cache: the steady state is what a model sees
    via_op = bench_host(op, x, 2.0, n=args.n, label="rapid_llm.kernels.scale")
    via_row = bench_host(direct, x, 2.0, n=args.n, label=row.name)
    print(f"scale, {args.numel} {args.dtype} elements on {via_op.device}; chosen row {row.name}")
    print(f"  through dispatch : {via_op.median_us:7.2f} us/call (p20 {via_op.p20_us:.2f}, p80 {via_op.p80_us:.2f})")
    print(f"  row called direct: {via_row.median_us:7.2f} us/call (p20 {via_row.p20_us:.2f}, p80 {via_row.p80_us:.2f})")
    print(f"  dispatch adds    : {via_op.median_us - via_row.median_us:7.2f} us/call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
