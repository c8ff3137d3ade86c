#!/usr/bin/env python
"""Each cheat row through the check that must catch it, timed: the table of what verify and bench say about
each (kernel, caught by, the message, seconds).

    python scripts/cheat_table.py tests/contract/cheats/cheat_rows.py [--device cpu|cuda]

ROWS is the file that defines the ``scale`` cheat rows (the tests' fixtures, tests/contract/cheats/cheat_rows.py),
loaded from its path. Runs on CPU (the persisting-L2 row needs CUDA and is skipped there, saying so) and on a GPU.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

from rapid_llm.bench import BenchRefused, bench
from rapid_llm.bench.ops import floor_call
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification.golden import verify

#: (row function in cheat_rows, the check that catches it, devices it runs on)
CHEATS = [
    ("scale_in_bf16", "verify", ("cpu", "cuda")),
    ("scale_on_a_host_thread", "verify", ("cpu", "cuda")),
    ("scale_memo_by_pointer", "bench", ("cpu", "cuda")),
    ("scale_memo_by_content", "bench", ("cpu", "cuda")),
    ("scale_after_warmup", "bench", ("cpu", "cuda")),
    ("scale_cached_reference", "bench", ("cpu", "cuda")),
    ("scale_with_persisting_l2", "bench", ("cuda",)),
]


def load_rows(path: Path) -> ModuleType:
    """The module of cheat rows at ``path``, loaded from its file."""
    if not path.is_file():
        raise SystemExit(f"cheat_table: no file {path} (the cheat rows, e.g. tests/contract/cheats/cheat_rows.py)")
    module_spec = importlib.util.spec_from_file_location("cheat_rows", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def check(rows: ModuleType, fn_name: str, how: str, device: str) -> tuple[str, str]:
    """(verdict, message) of the check on the cheat row."""
    fn = getattr(rows, fn_name)
    if how == "verify":
        name = f"external/{fn_name}"
        spec.register(KernelSpec(name=name, op="scale", backend="external", target=fn, dtypes=("fp32",),
                                 devices=(device,)), replace=True)
        report = verify(name, dtypes=["fp32"], device=device, record=False)
        kinds = sorted({d.kind for d in report.defects})
        return ("passed (not caught)" if report.passed else ", ".join(kinds)), \
            (str(report.defects[0]) if report.defects else "")
    x = torch.randn(1 << 16, device=device)
    try:
        bench(fn, x, 2.0, reference=floor_call("scale"), label=fn_name)
    except BenchRefused as exc:
        return exc.kind, exc.detail
    return "timed (not caught)", ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path, help="the file of cheat rows (tests/contract/cheats/cheat_rows.py)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    rows = load_rows(args.rows)
    print(f"cheat rows on {args.device} (torch {torch.__version__})")
    print(f"{'kernel':28} {'caught by':10} {'verdict':22} {'seconds':>8}  message")
    missed = 0
    for fn_name, how, devices in CHEATS:
        if args.device not in devices:
            print(f"{fn_name:28} {how:10} {'not run here':22} {'-':>8}  needs {' or '.join(devices)}")
            continue
        started = time.perf_counter()
        verdict, message = check(rows, fn_name, how, args.device)
        seconds = time.perf_counter() - started
        missed += "not caught" in verdict
        print(f"{fn_name:28} {how:10} {verdict:22} {seconds:8.2f}  {message[:160]}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
