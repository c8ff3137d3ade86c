"""LLM ops over token counts: every row against torch.compile of the native row, in one process.

    python benchmarks/bench_llm_ops.py [--ops rms_norm silu_and_mul ...] [--tokens 1 16 4096 16384]
                                       [--dtype bf16] [--results]

For each op that declares ``token_numel`` and each token count T, on the op's
bench case (the shapes its declaration names):

- every row that dispatch could use here, through ``bench_op`` (cold L2, CUDA
  events), as GB/s and % of the measured copy roofline;
- a device copy of the same number of bytes, by the same harness: what the
  hardware gives at this size, launch and ramp included (the roofline is a
  copy of over a GiB);
- ``torch.compile`` of the native row, timed by the same harness on the same
  arguments, as a user would call it (allocating its result, no ``out=``;
  compiled once per op, dynamic shapes after the first recompile, as
  torch.compile does by default);
- the call as a user sees it at small T, through dispatch (``K.<op>``) and
  through the compiled function: back to back (host time per call against
  device time: the larger is what a model pays per call), and alone (the
  median wall time of ``op(...); synchronize()``, printed beside the cost of
  a bare ``synchronize()``).

An op that declares other forms (``OpDecl.forms``: scaled_fp8_quant per
tensor, in 1x128 groups, static) gets one more table per form: every eligible
row, recorded (dispatch ranks a call of that form by them) and written with
the op's figures, the fastest row per T and where it changes (the crossover
``explain`` names), and ``torch.compile`` of the native row on that case. An
op whose bench case sits beside a ``BENCH_VARIANTS`` dict (other shapes, such
as merge_attn_states at 256 tokens x 16 heads) gets a table per variant, not
recorded.

``--results`` then runs ``benchmarks/sweep.py --results`` for the same ops, token counts and dtype:
the sweep (one worker per visible GPU) is the one writer of the committed figures,
``rapid_llm/kernels/ops/<group>/<op>/figures/<gpu kind>.json``, which dispatch ranks rows by on that GPU
kind, each naming the digest of the code it measured.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

import rapid_llm.kernels as K
from rapid_llm.bench import bench, bench_host, copy_roofline
from rapid_llm.bench.ops import bench_op, eligible_rows, make_args
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec

TOKENS = (1, 2, 4, 16, 64, 256, 1024, 4096, 16384)
SMALL_T = 16


def call_latency_us(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], n: int = 300) -> float:
    """Median wall time of one call followed by a device sync: what a caller waits for one op."""
    for _ in range(20):
        fn(*args, **kwargs)
    torch.cuda.synchronize()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn(*args, **kwargs)
        torch.cuda.synchronize()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(samples)


def _copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return dst.copy_(src)


def same_bytes_copy_us(bytes_moved: int, device: torch.device, repeats: int) -> float:
    """Device time of a copy that reads and writes ``bytes_moved`` bytes in all, by the same harness."""
    src = torch.empty(max(1, bytes_moved // 2), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return bench(_copy, dst, src, bytes_moved=bytes_moved, repeats=repeats, label="copy").median_us


def native_fn(op: str) -> Callable[..., Any]:
    return spec.native_row(op).load()


def bench_one(op: str, tokens: Sequence[int], dtype: str, device: torch.device, repeats: int) -> None:
    per_token = spec.get_decl(op).token_numel
    tdtype = platform.torch_dtype(dtype)
    compiled = torch.compile(native_fn(op))
    roofline = copy_roofline(device)
    measured = bench_op(op, [t * per_token for t in tokens], dtypes=[dtype], device=device, repeats=repeats,
                        record=True)
    print(f"\n== {op}, {dtype}, {per_token} elements per token; copy roofline {roofline:.0f} GB/s ==")
    print(f"{'T':>6}  {'fastest row':<24} {'us':>8} {'% copy':>7} {'% same-size copy':>16}  {'compile us':>10} "
          f"{'% copy':>7}  {'compile/row':>11}  {'eager us':>9}")
    goals = []
    for t in tokens:
        numel = t * per_token
        case = make_args(op, numel, tdtype, device)
        mine = [m for m in measured if m.numel == numel]
        best = min(mine, key=lambda m: m.result.median_us)
        eager = next((m for m in mine if spec.get_row(m.row).is_native), None)
        user_kwargs = {k: v for k, v in case.kwargs.items() if k != "out"}
        comp = bench(compiled, *case.args, bytes_moved=case.bytes_moved, repeats=repeats,
                     label="torch.compile(native)", **user_kwargs)
        copy_us = same_bytes_copy_us(case.bytes_moved, device, repeats)
        ratio = comp.median_us / best.result.median_us
        eager_us = f"{eager.result.median_us:>9.2f}" if eager else f"{'-':>9}"
        print(f"{t:>6}  {best.row:<24} {best.result.median_us:>8.2f} {100 * best.result.roofline_fraction:>6.1f}% "
              f"{100 * copy_us / best.result.median_us:>15.1f}%  {comp.median_us:>10.2f} "
              f"{100 * comp.roofline_fraction:>6.1f}%  {ratio:>10.2f}x  {eager_us}")
        goals.append((t, best, comp))
        del case
    print("all rows:")
    for m in measured:
        host = f", host {m.host_us:.2f} us" if m.host_us is not None else ""
        host += f", from a CUDA graph {m.graph_us:.2f} us" if m.graph_us is not None else ""
        print(f"  T={m.numel // per_token:<6} {m.row:<26} {m.result.median_us:>9.2f} us "
              f"{100 * m.result.roofline_fraction:>6.1f}% copy{host}")
    dispatched = getattr(K, op)
    bare = call_latency_us(lambda: None, (), {})
    print(f"a call as a user sees it, T <= {SMALL_T}: back to back (host us / device us per call) and alone "
          f"(call then synchronize, median of 300; a bare synchronize costs {bare:.2f} us)")
    for t in (t for t in tokens if t <= SMALL_T):
        case = make_args(op, t * per_token, tdtype, device)
        kwargs = {k: v for k, v in case.kwargs.items() if k != "out"}  # as a user calls it
        row = K.explain(op, *case.args).chosen.name
        line = f"  T={t:<3}"
        for label, fn in ((f"K.{op} ({row})", dispatched), ("torch.compile", compiled), ("eager", native_fn(op))):
            host = bench_host(fn, *case.args, n=200, rounds=5, warmup=20, **kwargs).median_us
            dev = bench(fn, *case.args, repeats=repeats, **kwargs).median_us
            alone = call_latency_us(fn, case.args, kwargs)
            line += f"  {label}: {host:.2f} / {dev:.2f}, alone {alone:.2f} us;"
        print(line.rstrip(";"))
    bench_forms(op, tokens, dtype, device, repeats, compiled)


def bench_forms(op: str, tokens: Sequence[int], dtype: str, device: torch.device, repeats: int,
                compiled: Callable[..., Any]) -> list:
    """Each of the op's other forms at each T: every eligible row (recorded), the fastest, and torch.compile."""
    decl = spec.get_decl(op)
    tdtype = platform.torch_dtype(dtype)
    out = []
    for label in decl.forms:
        sizes = [t * decl.token_numel for t in tokens]
        measured = bench_op(op, sizes, dtypes=[dtype], device=device, repeats=repeats, record=True, form=label)
        out += measured
        print(f"\n== {op}, {dtype}, form: {label} (recorded: calls of this form rank by these) ==")
        print(f"{'T':>6}  {'fastest row':<24} {'us':>8}  {'others':<48} {'compile us':>10}  {'compile/row':>11}")
        previous = None
        for t, numel in zip(tokens, sizes):
            mine = sorted((m for m in measured if m.numel == numel), key=lambda m: m.result.median_us)
            case = make_args(op, numel, tdtype, device, label)
            comp = bench(compiled, *case.args, bytes_moved=case.bytes_moved, repeats=repeats,
                         label="torch.compile(native)", **case.kwargs)
            others = "  ".join(f"{m.row} {m.result.median_us:.2f}" for m in mine[1:])
            change = f"  <- crossover from {previous}" if previous not in (None, mine[0].row) else ""
            print(f"{t:>6}  {mine[0].row:<24} {mine[0].result.median_us:>8.2f}  {others:<48} {comp.median_us:>10.2f}  "
                  f"{comp.median_us / mine[0].result.median_us:>10.2f}x{change}")
            previous = mine[0].row
            del case
    return out


def bench_variants(op: str, tokens: Sequence[int], dtype: str, device: torch.device, repeats: int) -> None:
    """Each of the op's BENCH_VARIANTS at each T: every eligible row and torch.compile of the floor (not recorded)."""
    decl = spec.get_decl(op)
    variants = getattr(sys.modules.get(decl.bench.__module__), "BENCH_VARIANTS", {})
    if not variants:
        return
    tdtype = platform.torch_dtype(dtype)
    compiled = torch.compile(native_fn(op))
    for label, make in variants.items():
        print(f"\n== {op}, {dtype}, variant: {label} (not recorded) ==")
        seen = set()
        for t in tokens:
            numel = t * decl.token_numel
            case = make(numel, tdtype, device)
            if case.bytes_moved in seen:  # a variant of one fixed shape is timed once
                continue
            seen.add(case.bytes_moved)
            verdicts = eligible_rows(op, dtype, device, numel)
            timings = []
            for name, why in verdicts.items():
                if why is None:
                    r = bench(spec.get_row(name).call_path(), *case.args, bytes_moved=case.bytes_moved,
                              repeats=repeats, label=name, **case.kwargs)
                    timings.append((name, r))
            comp = bench(compiled, *case.args, bytes_moved=case.bytes_moved, repeats=repeats,
                         label="torch.compile(native)", **case.kwargs)
            best = min(timings, key=lambda nr: nr[1].median_us)
            rows = "  ".join(f"{n} {r.median_us:.2f} us ({100 * (r.roofline_fraction or 0):.1f}%)" for n, r in timings)
            print(f"  T={t:<6} {rows}  torch.compile {comp.median_us:.2f} us "
                  f"({100 * (comp.roofline_fraction or 0):.1f}%); fastest {best[0]}, "
                  f"compile/fastest {comp.median_us / best[1].median_us:.2f}x")
            del case


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="+", help="default: every op that declares token_numel")
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--results", action="store_true",
                        help="then sweep the same ops into their figures files (benchmarks/sweep.py --results)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_llm_ops: needs a CUDA device (torch.compile and the JIT rows are timed on the GPU)")
        return 1
    device = torch.device("cuda")
    ops = args.ops or [op for op in spec.all_ops() if spec.get_decl(op).token_numel is not None]
    print(f"{platform.device_label(device)}, torch {torch.__version__}")
    start = time.perf_counter()
    for op in ops:
        bench_one(op, args.tokens, args.dtype, device, args.repeats)
        bench_variants(op, args.tokens, args.dtype, device, args.repeats)
    print(f"\nwall time {time.perf_counter() - start:.1f} s")
    if args.results:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import sweep

        print("\n== the figures: benchmarks/sweep.py --results ==")
        return sweep.main(["--ops", *ops, "--tokens", *map(str, args.tokens), "--dtypes", args.dtype,
                           "--repeats", str(args.repeats), "--results"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
