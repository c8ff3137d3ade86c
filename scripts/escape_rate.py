#!/usr/bin/env python
"""How often a row that skips its work on a fraction p of calls at random escapes bench, and what checking costs.

    python scripts/escape_rate.py [--rows tests/contract/cheats/shortcuts.py] [--runs 200] [--numel 4097]
                                  [--device cpu|cuda] [--checked 29 2]

For each p (10, 30, 50 %) and each number of checked calls, RUNS bench runs of
tests/contract/cheats/shortcuts.skipping_at_random(p) against the op's floor (scale, default counts): the escapes
(runs that gave a figure) over the runs, beside (1 - p)^n with n checked calls. Then the cost: seconds per bench()
of the honest floor row with each number of checked calls (the mean over RUNS // 4 runs, after one warm run).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rapid_llm.bench import BenchRefused, bench, integrity  # noqa: E402
from rapid_llm.bench.ops import floor_call  # noqa: E402

shortcuts = None  # the module of cheat rows (--rows), loaded from its file: scripts never import tests/


def _load_rows(path: Path):
    spec = importlib.util.spec_from_file_location("cheat_rows_shortcuts", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise SystemExit(f"escape_rate: no cheat rows at {path} (e.g. tests/contract/cheats/shortcuts.py)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def escapes(p: float, runs: int, x: torch.Tensor) -> tuple[int, Counter]:
    """Runs of a row skipping a fraction ``p`` of calls that bench did not refuse, and the refusals' kinds (the
    call at a checked call's addresses after the timed ones catches a skip too: ``pointer_memo``)."""
    row, escaped, kinds = shortcuts.skipping_at_random(p), 0, Counter()
    for _ in range(runs):
        shortcuts.forget()
        try:
            bench(row, x, 2.0, reference=floor_call("scale"), label=f"skipping {p:.0%}")
            escaped += 1
        except BenchRefused as exc:
            kinds[exc.kind] += 1
    return escaped, kinds


def seconds_per_bench(runs: int, x: torch.Tensor) -> float:
    floor = floor_call("scale")
    bench(floor, x, 2.0, reference=floor)
    started = time.perf_counter()
    for _ in range(runs):
        bench(floor, x, 2.0, reference=floor)
    return (time.perf_counter() - started) / runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=Path, default=Path(__file__).resolve().parents[1] / "tests" / "contract" /
                        "cheats" / "shortcuts.py", help="the file holding skipping_at_random (the cheat rows)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--numel", type=int, default=4097)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--checked", type=int, nargs="+", default=[integrity.CHECKED_CALLS, 2])
    parser.add_argument("--p", type=float, nargs="+", default=[0.1, 0.3, 0.5])
    args = parser.parse_args(argv)
    global shortcuts
    shortcuts = _load_rows(args.rows)
    x = torch.randn(args.numel, device=args.device)
    label = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"escape rate, {label}, torch {torch.__version__}, numel {args.numel}, 50 timed calls, {args.runs} runs")
    print(f"{'p':>5} {'checked':>7} {'escapes':>9} {'rate':>7} {'(1-p)^n':>8} {'s/run':>7}  refusals")
    default = integrity.CHECKED_CALLS
    try:
        for n in args.checked:
            integrity.CHECKED_CALLS = n
            for p in args.p:
                started = time.perf_counter()
                e, kinds = escapes(p, args.runs, x)
                per_run = (time.perf_counter() - started) / args.runs
                print(f"{p:5.2f} {n:7d} {e:4d}/{args.runs:<4d} {e / args.runs:7.3f} {(1 - p) ** n:8.4f} {per_run:7.3f}"
                      f"  {dict(kinds)}")
        for n in args.checked:
            integrity.CHECKED_CALLS = n
            print(f"cost: honest floor row, {n} checked calls: {seconds_per_bench(max(1, args.runs // 4), x):.4f} s "
                  "per bench()")
    finally:
        integrity.CHECKED_CALLS = default
    return 0


if __name__ == "__main__":
    sys.exit(main())
