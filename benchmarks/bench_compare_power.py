"""Are compare()'s verdicts honest? The A/A false-positive rate and the power to see a 3 % difference, measured.

    python benchmarks/bench_compare_power.py [OUT_DIR] [--trials 100] [--seconds 1.5] [--numel 268435456]
                                             [--dtype bf16] [--effect 0.03] [--min-pairs 20]

Two experiments on one shape of ``scale`` (default 256M bf16, 1 GiB moved per call):

* **A/A**: ``compare("native/scale", "native/scale")``, ``--trials`` times. The
  same row on both sides, so every "faster" or "slower" is a false positive;
  at the 5 % level at most about 5 of 100 trials should say one.
* **3 %**: ``compare("native/scale", "external/scale_plus_delay")``, where the
  second row is the same multiply behind a ``torch.cuda._sleep`` spin
  calibrated so that it takes ``1 + effect`` times as long. Its calibration is
  measured, not assumed: the ratio at no spin (the extra launch alone) and at
  a trial spin fix a line, the spin for the target is read off it, and a long
  compare() reports the ratio actually reached. Power is the fraction of
  trials that say "slower".

Each trial is one compare() call without verify (both rows are verified once
first) and without build facts, with ``--seconds`` of sampling at most; it
stops earlier once the pilot's noise says enough pairs were taken. With the
defaults the whole run takes about 4 minutes of GPU time.

Writes ``OUT_DIR/compare_power.json`` (every trial: ratio, interval, pairs,
verdict, seconds) and ``OUT_DIR/compare_power.log`` (what was printed).
OUT_DIR defaults to ``benchmarks/results/compare/``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from rapid_llm.bench.compare import compare
from rapid_llm.bench.harness import bench
from rapid_llm.bench.paired_stats import FASTER, NO_DIFFERENCE, SLOWER
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec, get_row, register

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "compare"
A_ROW = "native/scale"
DELAY_ROW = "external/scale_plus_delay"


class _Log:
    """Print and keep every line, for the log file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, *parts: Any) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.lines.append(line)


class DelayedScale:
    """``native/scale`` behind a GPU spin of ``cycles`` clock cycles on the current stream: a row that is
    the same work plus a delay, so its true ratio to the floor is known once calibrated."""

    def __init__(self, floor: Callable[..., Any]) -> None:
        self.floor = floor
        self.cycles = 0
        self.__name__ = "scale_plus_delay"

    def __call__(self, input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
        if self.cycles > 0:
            torch.cuda._sleep(self.cycles)
        return self.floor(input, factor, out=out)


def _spin(x: torch.Tensor, cycles: int) -> None:
    torch.cuda._sleep(cycles)


def _trial(b_row: str, args: argparse.Namespace, verify: bool = False, calibrating: bool = False) -> dict[str, Any]:
    """One compare() of A_ROW with ``b_row``; a calibration run takes more pairs, for a tighter ratio."""
    start = time.monotonic()  # wall time of the trial, for the report; the figures come from the harness
    c = compare(A_ROW, b_row, sizes=[args.numel], dtypes=[args.dtype], verify=verify, why=False, host=False,
                seconds=args.calibration_seconds if calibrating else args.seconds,
                min_pairs=args.calibration_pairs if calibrating else args.min_pairs,
                max_pairs=max(2000, args.calibration_pairs), repeats=args.repeats, effect=args.effect)
    if c.refused:
        raise SystemExit(f"bench_compare_power: {c.refused}")
    s = c.shapes[0]
    return {"ratio": s.estimate.ratio, "low": s.estimate.low, "high": s.estimate.high, "pairs": s.estimate.pairs,
            "sd_log": s.estimate.sd_log, "verdict": s.verdict, "a_median_us": s.a_median, "b_median_us": s.b_median,
            "pairs_for_effect": s.pairs_for_effect, "stopped": s.stopped,
            "seconds": round(time.monotonic() - start, 3)}


def calibrate(delay: DelayedScale, args: argparse.Namespace, log: _Log) -> dict[str, Any]:
    """Spin cycles that make the delayed row ``1 + effect`` times the floor, from two measured ratios."""
    x = torch.empty(1024, device="cuda")
    t1 = bench(_spin, x, 20_000, cold_l2=False, roofline=False).median_us
    t2 = bench(_spin, x, 200_000, cold_l2=False, roofline=False).median_us
    per_cycle_us = (t2 - t1) / 180_000
    delay.cycles = 0
    r0 = _trial(DELAY_ROW, args, verify=True, calibrating=True)
    base_us = r0["a_median_us"]
    guess = max(1, round(args.effect * base_us / per_cycle_us))
    delay.cycles = guess
    r1 = _trial(DELAY_ROW, args, calibrating=True)
    slope = (r1["ratio"] - r0["ratio"]) / guess
    log(f"calibration: floor {base_us:.2f} us; spin {1e3 * per_cycle_us:.3f} ns per cycle; ratio with the extra "
        f"launch and no spin {r0['ratio']:.4f}, with {guess} cycles {r1['ratio']:.4f}")
    if slope <= 0:
        raise SystemExit("bench_compare_power: the spin did not slow the row down; the calibration cannot proceed")
    if r0["ratio"] >= 1 + args.effect:
        raise SystemExit(f"bench_compare_power: the extra launch alone costs {100 * (r0['ratio'] - 1):.1f} % at "
                         f"numel={args.numel}, more than the {100 * args.effect:g} % to detect; use a larger --numel")
    delay.cycles = max(1, round((1 + args.effect - r0["ratio"]) / slope))
    check = _trial(DELAY_ROW, args, calibrating=True)
    log(f"calibrated: {delay.cycles} cycles; measured B/A {check['ratio']:.4f} "
        f"(95% CI {check['low']:.4f}-{check['high']:.4f}, {check['pairs']} pairs)")
    return {"cycles": delay.cycles, "spin_ns_per_cycle": 1e3 * per_cycle_us, "ratio_no_spin": r0["ratio"],
            "ratio_trial_spin": r1["ratio"], "trial_cycles": guess, "measured": check}


def run(args: argparse.Namespace, log: _Log) -> dict[str, Any]:
    floor = get_row(A_ROW).load()
    delay = DelayedScale(floor)
    register(KernelSpec(name=DELAY_ROW, op="scale", backend="external", target=delay, devices=("cuda",),
                        dtypes=get_row(A_ROW).dtypes, golden=GoldenRecord(verified=True, baseline=A_ROW),
                        description="native/scale behind a calibrated GPU spin"))
    log(f"compare power on {platform.device_label('cuda')}, torch {torch.__version__}: scale {args.dtype} "
        f"numel={args.numel}, {args.trials} trials each, <= {args.seconds:g} s per trial, min_pairs={args.min_pairs}, "
        f"repeats={args.repeats} per sample")
    calibration = calibrate(delay, args, log)
    results: dict[str, Any] = {"calibration": calibration}
    for name, b_row, hit in (("aa", A_ROW, lambda v: v in (FASTER, SLOWER)), ("shift", DELAY_ROW,
                                                                             lambda v: v == SLOWER)):
        trials = []
        for i in range(args.trials):
            trials.append(_trial(b_row, args))
            if (i + 1) % 10 == 0:
                log(f"{name}: {i + 1}/{args.trials} trials, {sum(hit(t['verdict']) for t in trials)} "
                    f"{'false positives' if name == 'aa' else 'detected'}")
        hits = sum(hit(t["verdict"]) for t in trials)
        pairs = sorted(t["pairs"] for t in trials)
        secs = sorted(t["seconds"] for t in trials)
        summary = {"trials": len(trials), "hits": hits, "rate": hits / len(trials),
                   "verdicts": {v: sum(t["verdict"] == v for t in trials) for v in (FASTER, SLOWER, NO_DIFFERENCE)},
                   "median_pairs": pairs[len(pairs) // 2], "max_pairs": pairs[-1],
                   "median_seconds": secs[len(secs) // 2], "max_seconds": secs[-1]}
        results[name] = {"summary": summary, "trials": trials}
        what = ("false-positive rate (A/A says faster or slower; target <= 5 %)" if name == "aa" else
                f"power (a {100 * args.effect:g} % slower row found slower; target >= 80 %)")
        log(f"{name}: {what}: {hits}/{len(trials)} = {100 * hits / len(trials):.0f} %; pairs per trial median "
            f"{summary['median_pairs']} (max {summary['max_pairs']}), seconds per trial median "
            f"{summary['median_seconds']:.2f} (max {summary['max_seconds']:.2f})")
    log("")
    log("| experiment | trials | verdicts (faster / slower / no difference) | rate | pairs per trial (median) | "
        "s per trial (median / max) |")
    log("| --- | --- | --- | --- | --- | --- |")
    for name, label in (("aa", "A/A (same row twice): false positives"),
                        ("shift", f"B {100 * args.effect:g} % slower: detected")):
        s = results[name]["summary"]
        v = s["verdicts"]
        log(f"| {label} | {s['trials']} | {v[FASTER]} / {v[SLOWER]} / {v[NO_DIFFERENCE]} | {100 * s['rate']:.0f} % | "
            f"{s['median_pairs']} | {s['median_seconds']:.2f} / {s['max_seconds']:.2f} |")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="folder for compare_power.json and .log")
    p.add_argument("--trials", type=int, default=100, help="trials per experiment (default 100)")
    p.add_argument("--seconds", type=float, default=1.5, help="most seconds of sampling per trial (default 1.5)")
    p.add_argument("--calibration-seconds", type=float, default=5.0, help="most seconds per calibration run")
    p.add_argument("--calibration-pairs", type=int, default=150, help="pairs per calibration run (default 150)")
    p.add_argument("--numel", type=int, default=1 << 28, help="elements of the scale call (default 256M)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    p.add_argument("--effect", type=float, default=0.03, help="the relative slow-down to detect (default 0.03)")
    p.add_argument("--min-pairs", type=int, default=20, help="pilot pairs per trial (default 20)")
    p.add_argument("--repeats", type=int, default=20, help="calls per harness sample (default 20)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_compare_power: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    if args.trials < 1 or args.seconds <= 0 or args.numel < 1 or not 0 < args.effect < 1:
        p.error("--trials and --numel must be >= 1, --seconds > 0, --effect in (0, 1)")
    log = _Log()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results = run(args, log)
    doc = {"script": "benchmarks/bench_compare_power.py", "started": started, "device": platform.device_label("cuda"),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, **results}
    args.out.mkdir(parents=True, exist_ok=True)
    platform.write_atomic(args.out / "compare_power.json", json.dumps(doc, indent=1) + "\n")
    platform.write_atomic(args.out / "compare_power.log", "\n".join(log.lines) + "\n")
    print(f"wrote {args.out / 'compare_power.json'} and {args.out / 'compare_power.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
