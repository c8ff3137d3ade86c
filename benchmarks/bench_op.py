"""Benchmark one op through bench_op: every row that can run here, cold L2, against the copy roofline.

    python benchmarks/bench_op.py OP [--sizes 1024 1048576] [--dtypes bf16 fp32] [--rows native/scale ...]
                                     [--verify] [--record] [--results | --out FILE.json]
    python benchmarks/bench_op.py --check-harness

Each row is called through its KernelSpec target on the op's declared bench
case (never through dispatch, so each figure is the row itself); bytes moved
come from the case, and the copy roofline is measured by the same harness.
Rows that cannot run here are listed with the reason. --verify first verifies
every golden-unverified row that can run here (a shipped row that has not run
on a GPU yet, such as gluon/rms_norm), so those that pass are timed beside the
others. --results writes the
figures into the op's folder (ops/<group>/<op>/figures/<gpu>.json, package data): committed, they rank
rows on every machine of this GPU kind until a row's code changes. --out writes them elsewhere.

The figures are printed, not recorded, unless --record: this process's
session ends when it exits, so the one lasting effect of recording is the
local store, which dispatch ranks by only when opted in
(RAPID_LLM_LOCAL_MEASUREMENTS=1). A look at the numbers should not leave
figures behind that a later notebook or plot might take for the committed
ones. --record keeps them there, for that opt-in on this machine.

``--check-harness`` prints the two figures that say the harness can be
trusted: below the L2 size nothing beats the copy roofline with cold L2
(while the same call with warm L2 may), and the spread of medians over five
repeated runs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from rapid_llm.bench import bench, bench_op, copy_roofline
from rapid_llm.bench.harness import l2_bytes
from rapid_llm.bench.ops import OpMeasurement, eligible_rows, write_results
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry.spec import get_decl, rows_for

GPU_SIZES = tuple(1 << p for p in range(10, 29, 2))  # 1K .. 256M, every 4x
CPU_SIZES = tuple(1 << p for p in range(10, 21, 2))  # 1K .. 1M


def torch_mul(x: torch.Tensor, factor: float, out: torch.Tensor) -> torch.Tensor:
    return torch.mul(x, factor, out=out)


def device_copy(x: torch.Tensor, factor: float, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(x)


TORCH_ARM, COPY_ARM = "reference/torch.mul", "reference/copy"
#: The harness check times a multiply by a factor that is not a power of two (no exponent-only shortcut).
FACTOR = 1.7


def _pair(numel: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.empty(numel, dtype=dtype, device=device).uniform_(-4, 4)
    return x, torch.empty_like(x)


def print_table(op: str, results: list[OpMeasurement], roofline: float, device_name: str) -> None:
    kind = "CPU numbers" if device_name == "cpu" else device_name
    print(f"{op} on {kind}; copy roofline {roofline:.0f} GB/s (measured by the harness)")
    for dtype in dict.fromkeys(m.dtype for m in results):
        print(f"\n[{dtype}]")
        print(f"{'numel':>10}  {'row':<22} {'median us':>10} {'p20-p80 us':>17} {'GB/s':>8} {'% copy':>7} {'host us':>8}")
        for m in (m for m in results if m.dtype == dtype):
            b = m.result
            gbps = f"{b.gbps:>8.1f}" if b.gbps is not None else f"{'-':>8}"
            frac = f"{100 * b.roofline_fraction:>6.1f}%" if b.roofline_fraction is not None else f"{'-':>7}"
            host = f"{m.host_us:>8.2f}" if m.host_us is not None else f"{'-':>8}"
            print(f"{m.numel:>10}  {m.row:<22} {b.median_us:>10.2f} {b.p20_us:>8.2f}-{b.p80_us:<8.2f} {gbps} {frac} {host}")


def check_harness(device: torch.device, repeats: int) -> None:
    """Cold-L2 sanity (never above the copy roofline below L2) and run-to-run spread."""
    roofline = copy_roofline(device)
    l2 = l2_bytes(device)
    print(f"harness check on {platform.device_label(device)}: copy roofline {roofline:.0f} GB/s, L2 {l2 / 2**20:.0f} MiB")
    if device.type != "cuda":
        print("\n1. cold-L2 check: skipped, the CPU path does not rotate buffers (GPU only)")
    else:
        print("\n1. below L2 (input + output < L2): cold vs warm L2, bf16")
        print(f"{'numel':>10} {'set MiB':>8}  {'arm':<20} {'cold GB/s':>10} {'cold %':>7} {'warm GB/s':>10} {'warm %':>7}"
              "  verdict")
        worst = 0.0
        for numel in (1 << 18, 1 << 20, 1 << 22, (l2 // 4) // 2):
            x, out = _pair(numel, torch.bfloat16, device)
            for name, fn in ((TORCH_ARM, torch_mul), (COPY_ARM, device_copy)):
                cold = bench(fn, x, FACTOR, out, bytes_moved=2 * x.nbytes, repeats=repeats)
                warm = bench(fn, x, FACTOR, out, bytes_moved=2 * x.nbytes, repeats=repeats, cold_l2=False)
                worst = max(worst, cold.roofline_fraction)
                verdict = "ok" if cold.roofline_fraction <= 1.0 else "ABOVE ROOFLINE"
                print(f"{numel:>10} {4 * numel / 2**20:>8.1f}  {name:<20} {cold.gbps:>10.1f}"
                      f" {100 * cold.roofline_fraction:>6.1f}% {warm.gbps:>10.1f} {100 * warm.roofline_fraction:>6.1f}%"
                      f"  {verdict}")
        print(f"highest cold-L2 figure below L2: {100 * worst:.1f}% of the copy roofline")
    print("\n2. run-to-run spread of the median over 5 runs")
    sizes = (1 << 20, 1 << 26) if device.type == "cuda" else (1 << 16, 1 << 20)
    for numel in sizes:
        x, out = _pair(numel, torch.bfloat16, device)
        medians = [bench(torch_mul, x, FACTOR, out, bytes_moved=2 * x.nbytes, repeats=repeats).median_us
                   for _ in range(5)]
        mid = sorted(medians)[2]
        spread = (max(medians) - min(medians)) / mid
        print(f"  torch.mul bf16 numel={numel}: medians {', '.join(f'{m:.2f}' for m in medians)} us; "
              f"spread (max-min)/median = {100 * spread:.1f}%")



def verify_unverified(op: str, device: torch.device) -> None:
    """Verify each row of ``op`` that could run here but for its golden record; print each verdict. A row that
    passes is eligible for this process's bench_op (the registry holds the new record)."""
    from rapid_llm.kernels.verification.golden import verify

    for row in rows_for(op):
        if row.golden.verified or row.golden.refused or device.type not in row.devices or not row.probe(device):
            continue
        report = verify(row.name, device=device)
        print(f"verify {row.name}: {'pass' if report.passed else 'FAIL'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("op", nargs="?", help="the op to benchmark, e.g. scale")
    parser.add_argument("--sizes", type=int, nargs="+", help="element counts (default 1K..256M on GPU, 1K..1M on CPU)")
    parser.add_argument("--tokens", type=int, nargs="+",
                        help="token counts instead of sizes, for ops that declare token_numel (rms_norm, rope, ...)")
    parser.add_argument("--dtypes", nargs="+", help="default: the rows' bf16/fp16/fp32")
    parser.add_argument("--rows", nargs="+", help="default: every row that can run here")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--verify", action="store_true",
                        help="verify the golden-unverified rows that can run here first, and time those that pass")
    parser.add_argument("--graph", action="store_true", help="time through CUDA graphs (no launch overhead)")
    parser.add_argument("--record", action=argparse.BooleanOptionalAction, default=False,
                        help="keep the medians in the local store (ranked by only with RAPID_LLM_LOCAL_MEASUREMENTS=1)")
    parser.add_argument("--out", type=Path, help="write the figures to this file")
    parser.add_argument("--results", action="store_true", help="write the figures into the op's figures/ folder")
    parser.add_argument("--check-harness", action="store_true", help="cold-L2 and run-to-run spread checks only")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.check_harness:
        check_harness(device, args.repeats)
        return 0
    if not args.op:
        parser.error("give an OP (or --check-harness)")
    sizes = args.sizes or (GPU_SIZES if device.type == "cuda" else CPU_SIZES)
    if args.tokens:
        per_token = get_decl(args.op).token_numel
        if per_token is None:
            parser.error(f"{args.op} declares no token_numel: give --sizes")
        sizes = [t * per_token for t in args.tokens]
    if any(n < 1 for n in sizes):
        parser.error("sizes must be >= 1 element")
    start = time.perf_counter()
    if args.verify:
        verify_unverified(args.op, device)
    for row, why in eligible_rows(args.op, (args.dtypes or ["fp32"])[0], device, sizes[0]).items():
        if why is not None:
            print(f"skipped {row}: {why}")
    results = bench_op(args.op, sizes, dtypes=args.dtypes, rows=args.rows, record=args.record, device=device,
                       graph=args.graph, repeats=args.repeats)
    roofline = copy_roofline(device)
    print_table(args.op, results, roofline, platform.device_label(device))
    if args.out or args.results:
        print(f"wrote {write_results(args.op, results, device, args.out)}")
    print(f"\nwall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
