"""Verified autotune on a GPU: a CUDA rms_norm row over its 108-candidate space, and the shipped Triton row.

    python benchmarks/bench_tune.py [--tokens 1 16 128 1024 4096] [--dtype bf16] [--limit N] [--replace]
                                    [--triton] [--json FILE]

The CUDA row is ``benchmarks/tune/rms_norm_tunable.cu``: threads a row, rows a block, vector width and a
streaming store left to its ``// rapid_llm tune:`` line. ``tune`` compiles every candidate in parallel,
verifies each (the warm child process), times the ones that pass with the harness's checks at the op's
bench case (hidden 4096) for each T, pins the fastest geometric mean for this GPU kind, and the untuned row
(the source's defaults) is timed beside them. Then the pinned row, the untuned row and the shipped
``jit/rms_norm`` are timed again, one interleaved round each per T, so the last table compares them in one
process. ``--triton`` also tunes ``triton/rms_norm`` over its declared ``num_warps``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import rapid_llm.kernels as K
from rapid_llm.bench import bench
from rapid_llm.bench.ops import floor_call, make_args
from rapid_llm.bench.tune import DEFAULT_TOKENS, tune
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain.jit_row import JitRow

SOURCE = Path(__file__).resolve().parent / "tune" / "rms_norm_tunable.cu"
ROW = "jit/rms_norm_tunable"


def register_tunable() -> str:
    K.register(KernelSpec(name=ROW, op="rms_norm", backend="jit", target=JitRow(SOURCE, "rms_norm_tunable"),
                          available="rapid_llm.kernels.toolchain.jit:available", dtypes=("bf16", "fp16", "fp32"),
                          devices=("cuda",), golden=GoldenRecord(verified=False, baseline="native/rms_norm"),
                          description="benchmarks/tune/rms_norm_tunable.cu"), replace=True)
    return ROW


def progress(stage: str, done: int, total: int) -> None:
    if done == total or done % 20 == 0:
        print(f"  {stage}: {done}/{total}", flush=True)


def compare(rows: list[tuple[str, object]], tokens: list[int], dtype: str) -> None:
    """Each row at each T, interleaved: the tuned winner, the untuned row, the shipped row."""
    device = torch.device("cuda")
    print(f"\n{'T':>6} " + " ".join(f"{name:>24}" for name, _ in rows))
    for t in tokens:
        case = make_args("rms_norm", t * 4096, platform.torch_dtype(dtype), device)
        figures = {name: [] for name, _ in rows}
        for _ in range(3):
            for name, fn in rows:
                figures[name].append(bench(fn, *case.args, bytes_moved=case.bytes_moved, label=name,
                                           reference=floor_call("rms_norm"), **case.kwargs).median_us)
        print(f"{t:>6} " + " ".join(f"{sorted(v)[1]:>21.2f} us" for v in figures.values()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=list(DEFAULT_TOKENS))
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--limit", type=int, default=None, help="tune the first N candidates only")
    ap.add_argument("--replace", action="store_true", help="replace an earlier pin of the same code")
    ap.add_argument("--triton", action="store_true", help="also tune triton/rms_norm over its num_warps")
    ap.add_argument("--json", type=Path, default=None, help="write every candidate's record here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_tune: needs a CUDA GPU", file=sys.stderr)
        return 2
    row = register_tunable()
    started = time.perf_counter()
    result = tune(row, tokens=args.tokens, dtype=args.dtype, limit=args.limit, replace=args.replace,
                  progress=progress)
    print(result.summary())
    print(f"wall {time.perf_counter() - started:.1f} s")
    for r in result.table(top=10):
        print("  ", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items() if v is not None})
    failed = [c for c in result.candidates if c.state != "timed"]
    for c in failed[:10]:
        print(f"  not timed #{c.index} {c.label}: {c.state}: {c.why}")
    out = {"summary": result.summary(), "seconds": result.seconds, "candidates": result.table()}
    pinned = K.get_row(row).target
    print("\nexplain:", K.explain("rms_norm", dtype=args.dtype, device="cuda", numel=4096 * 128).verdict(row).reason)
    print(f"pinned config in a fresh lookup: {pinned.config}")
    compare([("tuned " + result.winner.label if result.winner else "untuned", K.get_row(row).call_path()),
             ("untuned", JitRow(SOURCE, "rms_norm_tunable", config={}).bound()),
             ("jit/rms_norm (shipped)", K.get_row("jit/rms_norm").call_path())], args.tokens, args.dtype)
    if args.triton:
        t = tune("triton/rms_norm", tokens=args.tokens, dtype=args.dtype, replace=args.replace, progress=progress)
        print(t.summary())
        out["triton"] = {"summary": t.summary(), "candidates": t.table()}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
