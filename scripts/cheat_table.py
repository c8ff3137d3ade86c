#!/usr/bin/env python
"""Each cheat row through the check that must catch it, timed: the table of what verify and bench say about
each (kernel, caught by, the verdict, seconds, the message).

    python scripts/cheat_table.py tests/contract/cheats [--device cpu|cuda]

ROWS is the folder of cheat rows (tests/contract/cheats: cheat_rows.py, tampering.py, shortcuts.py), or one or
more of those files, each loaded from its path. Runs on CPU (rows that need CUDA are listed as not run there)
and on a GPU; exits 1 when a row is not caught with the verdict it names.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from rapid_llm.bench import BenchRefused, bench
from rapid_llm.bench.ops import floor_call, make_args
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.toolchain.fastpath.binding import plain_launches
from rapid_llm.kernels.verification.golden import verify

#: (row function, its op, the check that catches it, the verdicts expected ("a|b": either), devices it runs on). A
#: verify row whose verdict is "FAIL" is caught by the comparison itself, with no defect named beyond it. A pointer
#: memo is timed_output_wrong where timed calls reuse addresses (CPU), else pointer_memo (a GPU's long rotation).
#: "graph": bench's CUDA-graph timing, as bench_op times the graph figure dispatch ranks by (plain launches).
CHEATS = [
    ("scale_in_bf16", "scale", "verify", "precision_loss", ("cpu", "cuda")),
    ("scale_on_a_host_thread", "scale", "verify", "deferred_work", ("cpu", "cuda")),
    ("scale_in_a_freed_block", "scale", "verify", "unwritten", ("cpu", "cuda")),
    ("scale_hardcoded_size", "scale", "verify", "FAIL", ("cpu", "cuda")),
    ("scale_memo_by_pointer", "scale", "bench", "timed_output_wrong|pointer_memo", ("cpu", "cuda")),
    ("scale_memo_by_content", "scale", "bench", "content_memo", ("cpu", "cuda")),
    ("scale_after_warmup", "scale", "bench", "timed_output_wrong", ("cpu", "cuda")),
    ("scale_cached_reference", "scale", "bench", "timed_output_wrong", ("cpu", "cuda")),
    ("scale_with_persisting_l2", "scale", "bench", "persisting_l2", ("cuda",)),
    ("scale_patching_event_timer", "scale", "bench", "timer_patched", ("cpu", "cuda")),
    ("scale_patching_perf_counter", "scale", "bench", "timer_patched", ("cpu", "cuda")),
    ("scale_patching_native_timer", "scale", "bench", "timer_patched", ("cuda",)),
    ("scale_patching_the_reference", "scale", "bench", "checker_tampered", ("cpu", "cuda")),
    ("scale_loosening_the_checker", "scale", "bench", "checker_tampered", ("cpu", "cuda")),
    ("scale_lazy_subclass", "scale", "bench", "lazy_result", ("cpu", "cuda")),
    ("scale_overriding_eq", "scale", "bench", "lazy_result", ("cpu", "cuda")),
    ("scale_skipping_close_launches", "scale", "bench", "timed_output_wrong", ("cpu", "cuda")),
    ("scale_skipping_at_random", "scale", "bench", "timed_output_wrong", ("cpu", "cuda")),
    ("rms_norm_unit_rms", "rms_norm", "bench", "timed_output_wrong", ("cpu", "cuda")),
    ("rms_norm_subsampled", "rms_norm", "bench", "timed_output_wrong", ("cpu", "cuda")),
    ("scale_overlapping_launches", "scale", "graph", "dependent_overlap", ("cuda",)),
]


def load_rows(path: Path) -> list[ModuleType]:
    """The modules of cheat rows at ``path`` (a file, or every .py file of a folder but its tests' helpers)."""
    files = sorted(p for p in path.glob("*.py") if p.stem not in ("__init__", "shipped")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise SystemExit(f"cheat_table: no cheat rows at {path} (e.g. tests/contract/cheats)")
    modules = []
    for f in files:
        module_spec = importlib.util.spec_from_file_location(f"cheat_rows_{f.stem}", f)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        modules.append(module)
    return modules


def find(modules: list[ModuleType], fn_name: str) -> tuple[Any, ModuleType] | None:
    return next(((getattr(m, fn_name), m) for m in modules if hasattr(m, fn_name)), None)


def check(fn: Any, fn_name: str, op: str, how: str, device: str) -> tuple[str, str]:
    """(verdict, message) of the check on the cheat row."""
    if how == "verify":
        name = f"external/{fn_name}"
        spec.register(KernelSpec(name=name, op=op, backend="external", target=fn, dtypes=("fp32",),
                                 devices=(device,)), replace=True)
        report = verify(name, dtypes=["fp32"], device=device, record=False)
        kinds = sorted({d.kind for d in report.defects})
        if report.passed:
            return "passed (not caught)", ""
        failed = next((r for r in report.results if not r.passed), None)
        return (", ".join(kinds) or "FAIL"), (str(report.defects[0]) if report.defects else
                                              f"{failed.dtype} {failed.verdict}" if failed else "")
    case = make_args(op, 1 << 16, torch.float32, device)
    try:
        if how == "graph":
            with plain_launches():  # as rapid_llm.bench.ops._graph_us times a row's graph figure
                bench(fn, *case.args, graph=True, integrity=False, label=fn_name, **case.kwargs)
        else:
            bench(fn, *case.args, reference=floor_call(op), label=fn_name, **case.kwargs)
    except BenchRefused as exc:
        return exc.kind, exc.detail
    return "timed (not caught)", ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path, nargs="+", help="the cheat rows: tests/contract/cheats, or its files")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    modules = [m for path in args.rows for m in load_rows(path)]
    print(f"cheat rows on {args.device} (torch {torch.__version__})")
    print(f"{'kernel':30} {'caught by':9} {'verdict':20} {'seconds':>8}  message")
    missed = 0
    for fn_name, op, how, expected, devices in CHEATS:
        found = find(modules, fn_name)
        if args.device not in devices or found is None:
            why = f"needs {' or '.join(devices)}" if found else "not in the rows given"
            print(f"{fn_name:30} {how:9} {'not run here':20} {'-':>8}  {why}")
            continue
        fn, module = found
        started = time.perf_counter()
        try:
            verdict, message = check(fn, fn_name, op, how, args.device)
        finally:
            for m in modules:
                if hasattr(m, "forget"):
                    m.forget()
        seconds = time.perf_counter() - started
        missed += not set(expected.split("|")) & set(verdict.split(", "))
        print(f"{fn_name:30} {how:9} {verdict:20} {seconds:8.2f}  {' '.join(message.split())[:150]}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
