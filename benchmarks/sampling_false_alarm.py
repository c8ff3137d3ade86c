"""The sampling verify mode's false-alarm rate, measured: an honest row judged again and again with fresh seeds.

    python benchmarks/sampling_false_alarm.py [--row native/top_k_top_p_sampling] [--runs 2000] [--dtype fp32]
                                              [--cases small edges sizes] [--device cpu]

The mode (rapid_llm.kernels.verification.sampling_mode) fails a case when the chi-square tail probability of its
draws is below ``alpha`` (1e-4 by default): that is the rate at which it wrongly fails a case of an honest row, if
its statistic is calibrated (pooled bins, the chi-square approximation, the counter-based random numbers). Each run
here draws a case anew (a fresh seed and offset, the same rows: top_k_top_p_sampling's reference cases) and asks
the mode for the case's tail probability. Printed per case: runs, how many failed at alpha (the observed
false-alarm rate, against the stated one), and the fraction of tail probabilities below 0.01, 0.05 and 0.5 (each
should be near its level: at 1000+ runs these show the calibration that a rate of 1e-4 cannot); and a failure
anywhere is listed. A Triton row on CPU needs TRITON_INTERPRET=1 (slow: use fewer runs and the small case).
"""
from __future__ import annotations

import argparse
import math
import time

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling import reference as R
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.comparison import to64
from rapid_llm.kernels.verification.sampling_mode import SamplingOutput

OP = "top_k_top_p_sampling"
LEVELS = (0.01, 0.05, 0.5)


def cases(names: list[str], dtype: torch.dtype, device: torch.device) -> dict[str, tuple]:
    """The reference cases by short name: 'small' (n = 1: one row of 16 tokens, 1024 draws), 'sizes' (four rows of
    256 logits with their own k, p and temperature), 'edges' (the probability and logit edge cases)."""
    gen = torch.Generator().manual_seed(20261206)
    found: dict[str, tuple] = {}
    if "small" in names:
        found["n=1: [1 x 1024, 16] probabilities"] = R.make_inputs((1,), dtype, device, gen)
    if "sizes" in names:
        found["n=65536: [4 x 64, 256] logits, own k, p, T"] = R.make_inputs((65536,), dtype, device, gen)
    if "edges" in names:
        for label, args in R.edge_cases(dtype, device, gen)[:2]:
            found[label.split(":")[0]] = args
    return found


def run(row: str, runs: int, dtype: torch.dtype, device: torch.device, names: list[str]) -> list[str]:
    fn = spec.get_row(row).load()
    mode: SamplingOutput = R.REFERENCE.compare
    lines = [f"{row} on {device} ({platform.device_label(device) if device.type == 'cuda' else 'CPU'}), "
             f"{platform.dtype_name(dtype)}, {runs} runs a case, stated false-alarm rate alpha = {mode.alpha:g} a case",
             f"{'case':<48} {'runs':>6} {'tested':>6} {'fail@alpha':>10} {'observed':>9} "
             + " ".join(f"{'p<' + format(lv, 'g'):>7}" for lv in LEVELS) + f" {'s':>6}"]
    total_fail = total_runs = 0
    for label, args in cases(names, dtype, device).items():
        view = R.view(*to64(args))  # the rows do not change with the seed: one view serves every run
        judge = SamplingOutput(view=lambda *a, _v=view: _v, alpha=mode.alpha, min_expected=mode.min_expected)
        started = time.perf_counter()
        p_values, fails = [], []
        for i in range(runs):
            so = torch.tensor([1_000_003 * (i + 1), 7 * i], dtype=torch.int64, device=device)
            here = (*args[:3], so, *args[4:])
            got = R.call(fn, *here)
            _, judged = judge._judge(got, to64(here))
            if judged.tested:
                p_values.append(judged.p_value)
            if judged.p_value < mode.alpha or bool(judged.outside.any()) or bool(judged.unstable.any()):
                fails.append((i, judged.p_value, int(judged.outside.sum()), int(judged.unstable.sum())))
        took = time.perf_counter() - started
        tested = len(p_values)
        p = torch.tensor(p_values, dtype=torch.float64) if p_values else torch.ones(1, dtype=torch.float64)
        fracs = " ".join(f"{float((p < lv).double().mean()):>7.4f}" for lv in LEVELS)
        lines.append(f"{label[:48]:<48} {runs:>6} {tested:>6} {len(fails):>10} {len(fails) / max(tested, 1):>9.2e} "
                     f"{fracs} {took:>6.1f}")
        lines += [f"  failed: run {i}, p = {pv:.3g}, outside {o}, changed {c}" for i, pv, o, c in fails]
        total_fail, total_runs = total_fail + len(fails), total_runs + tested
    upper = _upper95(total_fail, total_runs)
    rate = total_fail / max(total_runs, 1)
    lines.append(f"all cases: {total_fail} false alarms in {total_runs} tested runs = {rate:.2e} (95% upper bound "
                 f"{upper:.2e}); stated {mode.alpha:g} a case")
    return lines


def _upper95(k: int, n: int) -> float:
    """One-sided 95% upper bound on a rate seen k times in n (k = 0: the rule of three)."""
    if n == 0:
        return 1.0
    if k == 0:
        return 3.0 / n
    p = k / n
    return p + 1.645 * math.sqrt(p * (1 - p) / n) + 1.0 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--row", default="native/top_k_top_p_sampling")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cases", nargs="+", default=["small", "edges", "sizes"], choices=["small", "edges", "sizes"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for line in run(args.row, args.runs, platform.torch_dtype(args.dtype), torch.device(args.device), args.cases):
        print(line, flush=True)


if __name__ == "__main__":
    main()
