#!/usr/bin/env python
"""Each defect kernel through the check that must catch it, timed: the table of what verify, compute-sanitizer
and the child process say about each, and whether this process's CUDA context still works after the crashes.

    python scripts/defect_table.py tests/unit/verification/defects [--only STEM ...]

DEFECTS is the folder of the defect sources (the tests' fixtures, tests/unit/verification/defects). Needs a
CUDA device. Rows are registered as JIT rows of ``scale`` from the defect sources.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from rapid_llm.kernels.verification import isolate
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.toolchain.jit_row import JitRow
from rapid_llm.kernels.registry.spec import KernelSpec

#: (source stem, how it is checked): "verify" in this process, "sanitize:<tool>", or "child" (crash or hang).
CASES = [
    ("mutates_input", "verify"), ("writes_nothing", "verify"), ("other_stream", "verify"),
    ("constant_output", "verify"), ("out_of_bounds", "verify"), ("reads_past_end", "verify"),
    ("flush_to_zero", "verify"), ("uninit_global_read", "verify"),
    ("out_of_bounds", "sanitize:memcheck"), ("race", "sanitize:racecheck"), ("race_fixed", "sanitize:racecheck"),
    ("null_write", "child"), ("device_assert", "child"), ("endless_loop", "child"), ("fixed", "verify"),
]


def register(defects: Path, stem: str) -> str:
    fn = f"scale_{stem}"
    spec.register(KernelSpec(name=f"jit/{fn}", op="scale", backend="jit", target=JitRow(defects / f"{stem}.cu", fn),
                             available="rapid_llm.kernels.toolchain.jit:available", dtypes=("bf16", "fp16", "fp32"),
                             devices=("cuda",)), replace=True)
    return f"jit/{fn}"


def check(defects: Path, stem: str, how: str) -> str:
    name = register(defects, stem)
    if how == "verify":
        report = verify(name, dtypes=["fp32"], isolate=False)
        if report.defects:
            return f"FAIL: {report.defects[0]}"
        r = report["fp32"]
        return "pass, no defects" if report.passed else f"FAIL: {r.n_bad} of {r.n_elements} elements off ({r.error})"
    if how.startswith("sanitize:"):
        tool = how.split(":", 1)[1]
        result = isolate.run_child(isolate.recipe(spec.get_row(name)), dtypes=["fp32"], sizes=[1, 4097], tool=tool)
        return f"{result.status}: " + (str(result.findings[0]) if result.findings else result.message[:160])
    report = verify(name, dtypes=["fp32"], sizes=[1, 4097], isolate=True)
    broken = next((n for n in report.notes if n.startswith("broken")), None)
    return broken or f"not broken: {report.notes}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("defects", type=Path, help="the folder of defect sources (tests/unit/verification/defects)")
    parser.add_argument("--only", nargs="+", help="source stems to run")
    parser.add_argument("--checks", nargs="+", choices=["verify", "sanitize", "child"],
                        help="kinds of check to run (default: all)")
    args = parser.parse_args(argv)
    missing = sorted({stem for stem, _ in CASES if not (args.defects / f"{stem}.cu").is_file()})
    if missing:
        print(f"defect_table: {args.defects} has no {', '.join(s + '.cu' for s in missing)} (the defect sources, "
              "e.g. tests/unit/verification/defects)")
        return 1
    if not torch.cuda.is_available():
        print("defect_table: needs a CUDA device")
        return 1
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"compute-sanitizer: {isolate.sanitizer_path() or 'not found'}")
    print("| kernel | caught by | what it says | seconds |\n| --- | --- | --- | --- |", flush=True)
    for stem, how in CASES:
        if (args.only and stem not in args.only) or (args.checks and how.split(":")[0] not in args.checks):
            continue
        t0 = time.perf_counter()
        try:
            said = check(args.defects, stem, how)
        except Exception as exc:  # a check that cannot run is a row of the table too
            said = f"could not run: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        said = said.replace("|", "/").replace("\n", " ")
        print(f"| {stem}.cu | {how} | {said} | {time.perf_counter() - t0:.1f} |", flush=True)
    x = torch.ones(4, device="cuda")
    ok = (x + 1).sum().item() == 8.0
    print(f"\nthis process's next CUDA call after the crashes: {'works' if ok else 'FAILED'} "
          f"(torch.ones(4).add(1).sum() on cuda = {(x + 1).sum().item()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
