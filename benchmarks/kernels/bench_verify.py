"""How long verify takes right after a cell's build: the warm worker against a fresh child, same process.

    python benchmarks/kernels/bench_verify.py [--cells scale_vec rms_norm_cell] [--edits 10] [--fresh 10]
                                              [--memcheck 3] [--memcheck-fresh 0] [--out FILE.json]

For each cell (notebook 01's vectorised scale, notebook 06's rms_norm), each
"edit" writes the cell with one new comment line (a new source digest, so
nothing is remembered from an earlier verify), builds it, and times
``verify`` of the fresh row: once with the warm worker and once with a fresh
child process per call (``RAPID_LLM_WARM_WORKER=0``'s path), interleaved. The
medians, and the split verify's notes give for the warm calls, are printed;
then ``verify(row, sanitize=("memcheck",))`` a few times: the memcheck worker was started
beside the plain one at the first build (as a cell's build does), and its own start-up time is
printed too. Needs a CUDA GPU and
the CUDA toolkit (the rows are JIT CUDA rows).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain.jit_row import JitRow
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification import isolate, worker
from rapid_llm.kernels.verification.golden import verify

CELLS = {  # cell, the op it serves, its launcher
    "scale_vec": ("csrc/elementwise/scale_vec.cu", "scale", "scale_vec"),
    "rms_norm_cell": ("csrc/norm/rms_norm_cell.cu", "rms_norm", "rms_norm"),
}


def edited_row(name: str, edit: int, workdir: Path) -> str:
    """The cell with one new comment line, built and registered as jit/<name>_e<edit>; the row's name."""
    rel, op, fn = CELLS[name]
    text = (platform.PACKAGE_DIR.parent / rel).read_text()
    path = workdir / f"{name}_e{edit}.cu"
    path.write_text(f"// edit {edit} at {time.time_ns()}\n{text}")
    row = f"jit/{name}_e{edit}"
    spec.register(KernelSpec(name=row, op=op, backend="jit", target=JitRow(path, fn),
                             available="rapid_llm.kernels.toolchain.jit:available", dtypes=("bf16", "fp16", "fp32"),
                             devices=("cuda",)), replace=True)
    spec.get_row(row).call_path()  # the build, as the cell's run does it
    return row


def timed_verify(row: str, warm: bool, **kwargs: Any) -> tuple[float, tuple[str, ...]]:
    isolate.WARM = warm
    t0 = time.perf_counter()
    report = verify(row, **kwargs)
    seconds = time.perf_counter() - t0
    if not report.passed:
        raise SystemExit(f"{row} failed verify:\n{report}")
    return seconds, report.notes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    parser.add_argument("--edits", type=int, default=10, help="edits verified with the warm worker, per cell")
    parser.add_argument("--fresh", type=int, help="edits verified in a fresh child, per cell (default: --edits)")
    parser.add_argument("--memcheck", type=int, default=3, help="verify(sanitize=('memcheck',)) runs per cell")
    parser.add_argument("--memcheck-fresh", type=int, default=0,
                        help="the same in a fresh sanitized process per call (the path before the warm memcheck "
                             "worker), interleaved with the warm ones, per cell")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_verify: needs a CUDA GPU (the cells are JIT CUDA rows)")
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="rapid_llm_bench_verify_"))
    isolate.prewarm()  # what a cell's build does in a notebook
    doc: dict[str, Any] = {"device": platform.device_label(torch.device("cuda")), "torch": torch.__version__,
                           "edits": args.edits, "cells": {}}
    n_fresh = args.edits if args.fresh is None else args.fresh
    for name in args.cells:
        warm, fresh, notes = [], [], []
        for edit in range(max(args.edits, n_fresh)):
            for mode in (True, False):
                if edit >= (args.edits if mode else n_fresh):
                    continue
                row = edited_row(name, 2 * edit + int(mode), workdir)
                seconds, row_notes = timed_verify(row, mode)
                (warm if mode else fresh).append(seconds)
                if mode:
                    notes.append(next((n for n in row_notes if n.startswith("first run")), ""))
        memcheck, memcheck_fresh = [], []  # the warm worker started at the first build (isolate.prewarm)
        for edit in range(max(args.memcheck, args.memcheck_fresh)):
            for warm_mode, times, n in ((True, memcheck, args.memcheck), (False, memcheck_fresh, args.memcheck_fresh)):
                if edit < n:
                    row = edited_row(name, 1000 + 2 * edit + int(warm_mode), workdir)
                    times.append(timed_verify(row, warm_mode, sanitize=("memcheck",))[0])
        sanitizer = isolate.sanitizer_path()
        memcheck_start = worker.start_seconds(isolate.sanitizer_wrapper(sanitizer, "memcheck")) if sanitizer \
            else float("nan")
        cell = {"warm_s": warm, "fresh_s": fresh, "memcheck_s": memcheck, "memcheck_fresh_s": memcheck_fresh,
                "warm_notes": notes,
                "memcheck_worker_start_s": memcheck_start, "worker_start_s": worker.start_seconds()}
        doc["cells"][name] = cell
        fresh_text = (f"fresh child {statistics.median(fresh):.2f} s (median of {len(fresh)}, "
                      f"{statistics.median(fresh) / statistics.median(warm):.1f}x)") if fresh else "no fresh child runs"
        print(f"{name}: verify right after the build: warm worker {statistics.median(warm):.2f} s (median of "
              f"{len(warm)}), {fresh_text}; "
              f"sanitize=('memcheck',) first {memcheck[0] if memcheck else float('nan'):.2f} s, then median of "
              f"{len(memcheck[1:])}: {statistics.median(memcheck[1:]) if memcheck[1:] else float('nan'):.2f} s")
        print(f"  warm: {', '.join(f'{s:.2f}' for s in warm)}")
        print(f"  fresh: {', '.join(f'{s:.2f}' for s in fresh)}")
        print(f"  memcheck: {', '.join(f'{s:.2f}' for s in memcheck)}  (the worker itself took "
              f"{memcheck_start:.2f} s to start, in the background from the first build; the plain worker "
              f"{worker.start_seconds():.2f} s)")
        if memcheck_fresh:
            print(f"  memcheck in a fresh sanitized process per call: median {statistics.median(memcheck_fresh):.2f} s"
                  f" of {len(memcheck_fresh)} ({', '.join(f'{s:.2f}' for s in memcheck_fresh)}); the warm worker's "
                  f"median {statistics.median(memcheck):.2f} s of {len(memcheck)}, interleaved")
        print(f"  a warm call's notes: {notes[len(notes) // 2]}")
    if args.out:
        platform.write_atomic(args.out, json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
