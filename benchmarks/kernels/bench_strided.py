"""Contiguous vs row-strided inputs: rms_norm, fused_add_rms_norm and silu_and_mul, every row that runs here.

    python benchmarks/kernels/bench_strided.py [--tokens 1 16 128 1024 4096 16384] [--hidden 4096] [--dtype bf16]
                                               [--ops rms_norm ...] [--graph] [--compiled] [--device cuda]

The strided arm is how vLLM and FlashInfer test these ops: ``x = randn(T, 2H)[:, :H]``
(silu_and_mul: ``randn(T, 2 * 2I)[:, :2I]`` with I = H), one row stride over a
contiguous last dim. A row that declares layouts ("contiguous", "rows") should move
the same bytes at the same speed on both; the ratio column is strided GB/s over
contiguous GB/s (the goal: within 5 %, marked "<" when below 0.95). Each row is called
directly (its call path, as bench_op does), and the op itself through dispatch is
timed as "dispatch -> <row it chose>", which is what a model sees. A last line copies x's
view into a dense tensor (torch's ``copy_``), with no kernel of this project in it. It was
meant as the layout's own cost, but it is no bound: on the H200 torch's strided copy reaches
0.43-0.53 of its dense copy, where every fast row keeps 0.95-0.99. ``--compiled`` adds
``torch.compile`` of the native row on both layouts: Inductor's own kernel for the same view,
a second implementation to tell a row's loss from the layout's.

Timing is rapid_llm.bench's (cold L2, CUDA events, medians). Each arm hands the harness
its dense buffer and takes its view inside the timed call (both arms alike: ``buf[:, :H]``
of a [T, H] buffer is the whole of it), so the two arms differ only in the view (the
H200 log in benchmarks/results/logs was measured this way, before the harness's rotation
copies kept each argument's layout, which they now do). Bytes moved are
what an ideal kernel reads and writes in both arms (the gaps are never touched).
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

import rapid_llm.kernels as K
from rapid_llm.bench import bench
from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain.fastpath.binding import plain_launches
from rapid_llm.kernels.dispatch.dispatcher import explain, resolve
from rapid_llm.kernels.registry.spec import get_row, native_row

TOKENS = (1, 16, 128, 1024, 4096, 16384)
OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
EPS = 1e-6
#: Strided GB/s under this fraction of contiguous GB/s misses the goal.
GOAL = 0.95


@dataclass
class Case:
    """One op at one size: the dense buffers the harness may clone, and how a call views them."""

    args: tuple  # (x buffer, *other tensors)
    width: int  # the row width x has inside its buffer
    call: Callable[..., Any]  # call(fn, x_view, *other tensors)
    bytes_moved: int


def make_case(op: str, tokens: int, hidden: int, dtype: torch.dtype, device: torch.device, strided: bool,
              pad: int = 0) -> Case:
    """x [T, W] inside a [T, 2W + pad] buffer when strided (W = H, silu: W = 2I = 2H), else a [T, W] buffer."""
    esize = torch.empty((), dtype=dtype).element_size()
    width = 2 * hidden if op == "silu_and_mul" else hidden
    buf = torch.empty((tokens, 2 * width + pad if strided else width), dtype=dtype, device=device).normal_()
    w = torch.empty(hidden, dtype=dtype, device=device).normal_(1.0, 0.5)
    if op == "rms_norm":
        out = torch.empty((tokens, hidden), dtype=dtype, device=device)
        return Case((buf, w, out), width, lambda fn, x, w, out: fn(x, w, EPS, out=out),
                    (2 * tokens * hidden + hidden) * esize)
    if op == "fused_add_rms_norm":  # vLLM's residual is randn_like(x): contiguous
        residual = torch.empty((tokens, hidden), dtype=dtype, device=device).normal_()
        return Case((buf, residual, w), width, lambda fn, x, r, w: fn(x, r, w, EPS),
                    (4 * tokens * hidden + hidden) * esize)
    out = torch.empty((tokens, hidden), dtype=dtype, device=device)
    return Case((buf, out), width, lambda fn, x, out: fn(x, out=out), 3 * tokens * hidden * esize)


def timed(fn: Callable[..., Any], case: Case, graph: bool, label: str) -> float:
    """GB/s of ``fn`` on the case's view, its buffers rotated by the harness."""
    width = case.width

    def run(buf: torch.Tensor, *rest: torch.Tensor) -> Any:
        return case.call(fn, buf[:, :width], *rest)

    # A graph holds calls of one row back to back, so it is timed as plain launches, as bench_op's graph figure
    # is (rapid_llm.bench.ops._graph_us says why).
    with plain_launches() if graph else contextlib.nullcontext():
        return bench(run, *case.args, bytes_moved=case.bytes_moved, graph=graph, label=label).gbps


def copy_of_x(case: Case, graph: bool, label: str) -> float:
    """GB/s of torch's copy of x's view into a dense [T, W] tensor, no row involved (not a bound: see the top)."""
    width = case.width
    buf = case.args[0]
    dense = torch.empty((buf.shape[0], width), dtype=buf.dtype, device=buf.device)

    def run(buf: torch.Tensor) -> torch.Tensor:
        return dense.copy_(buf[:, :width])

    return bench(run, buf, bytes_moved=2 * dense.nbytes, graph=graph, label=label).gbps


def runnable(op: str, dtype: str, device: torch.device, numel: int) -> dict[str, str | None]:
    """Each row -> None when dispatch could choose it for both layouts here, else why not."""
    contiguous = explain(op, dtype=dtype, device=device, numel=numel, layout="contiguous")
    rows = explain(op, dtype=dtype, device=device, numel=numel, layout="rows")
    return {v.name: (v.reason if v.verdict == "filtered" else
                     rows.verdict(v.name).reason if rows.verdict(v.name).verdict == "filtered" else None)
            for v in contiguous.rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--hidden", type=int, default=4096, help="H (silu_and_mul: I = H, x is [T, 2I])")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--graph", action="store_true", help="time CUDA-graph replays (no launch overhead)")
    parser.add_argument("--compiled", action="store_true",
                        help="also time torch.compile of the native row (Inductor's kernel for each layout)")
    parser.add_argument("--device", help="cuda or cpu (default: cuda; cpu only as a smoke run)")
    parser.add_argument("--pad", type=int, default=0,
                        help="elements added to the strided arm's row stride (2W + pad): whether a ratio follows "
                             "the stride's address pattern rather than the kernel (default 0, vLLM's form)")
    args = parser.parse_args(argv)
    device = torch.device(args.device or "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_strided: no CUDA device here (pass --device cpu for a smoke run of the script)")
        return 1
    dtype = platform.torch_dtype(args.dtype)
    if args.pad < 0:
        parser.error(f"--pad must be >= 0, got {args.pad}")
    print(f"contiguous vs row-strided x, H = {args.hidden} {args.dtype} on {platform.device_label(device)}"
          f"{', CUDA graphs' if args.graph else ''}{f', row stride 2W + {args.pad}' if args.pad else ''}; GB/s of the ideal bytes, ratio = strided / contiguous")
    misses, fast = 0, 0
    compiled: dict[str, Callable[..., Any]] = {}
    for op in args.ops:
        print(f"\n{op}")
        print(f"{'T':>6}  {'row':<40} {'contig GB/s':>11} {'strided GB/s':>12} {'ratio':>6}")
        for tokens in args.tokens:
            cases = {s: make_case(op, tokens, args.hidden, dtype, device, s, args.pad) for s in (False, True)}
            numel = cases[False].args[0].numel()
            verdicts = runnable(op, args.dtype, device, numel)
            arms = [(name, get_row(name).call_path()) for name, why in verdicts.items() if why is None]
            contiguous_row = resolve(op, dtype=dtype, device=device, numel=numel, layout="contiguous").name
            strided_row = resolve(op, dtype=dtype, device=device, numel=numel, layout="rows").name
            label = contiguous_row if contiguous_row == strided_row else f"{contiguous_row} | {strided_row}"
            arms.append((f"dispatch -> {label}", getattr(K, op)))
            if args.compiled:
                if op not in compiled:
                    compiled[op] = torch.compile(native_row(op).load())
                arms.append(("torch.compile(native)", compiled[op]))
            for name, fn in arms:
                gbps = [timed(fn, cases[s], args.graph, f"{name} {'strided' if s else 'contiguous'}")
                        for s in (False, True)]
                ratio = gbps[1] / gbps[0]
                mark = "<" if ratio < GOAL else ""
                if not name.startswith(("native/", "dispatch", "torch.compile")):
                    fast, misses = fast + 1, misses + bool(mark)
                print(f"{tokens:>6}  {name:<40} {gbps[0]:>11.1f} {gbps[1]:>12.1f} {ratio:>6.3f}{mark}")
            copies = [copy_of_x(cases[s], args.graph, f"copy of x {'strided' if s else 'contiguous'}")
                      for s in (False, True)]
            print(f"{tokens:>6}  {'copy of x (the layout alone)':<40} {copies[0]:>11.1f} {copies[1]:>12.1f} "
                  f"{copies[1] / copies[0]:>6.3f}")
            for name, why in verdicts.items():
                if why is not None and tokens == args.tokens[0]:
                    print(f"{'':>6}  {name:<40} not run: {why}")
            del cases
    print(f"\n{misses} of {fast} fast-row figures below {GOAL:.0%} of their contiguous bandwidth" if fast else
          "\nno fast row ran here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
