"""Our rows of an LLM op beside torch.compile's kernel for it, one call each, for ncu to read side by side.

    ncu --profile-from-start off --set full -o OUT \\
        python benchmarks/kernels/profile_vs_compile.py --ops rms_norm --tokens 16 [--print-code]

At the token counts of decoding a row and torch.compile's kernel move the same few hundred kilobytes, so what
separates them is latency: how many round trips to memory a thread waits on, how much code it runs between them,
how the grid covers the rows. Figures of the bench harness say which is faster; ncu's counters say why. Each
call runs inside the profiled range (torch.cuda.profiler start/stop) and an NVTX range named
``<op> T=<T> <implementation>``, after warm-up calls outside it, so ncu sees exactly one launch of each.
--print-code prints the Triton source Inductor generated for the op (its launch configuration included).
--hidden sets the norms' hidden size (another model's). ``--compile-dynamic auto`` compiles once with torch's
default (``dynamic=None``), as the peer benchmark does: called at the --tokens in order, the kernel from the second
T on is Inductor's dynamic-shape one, which is what that benchmark times there (the default, ``false``, compiles
a kernel for each T). ``--summarize CSV`` turns ncu's export of the report
(``ncu --import OUT.ncu-rep --page details --csv``) into one line of key metrics per kernel.

ncu locks the SM clock at base by default (about 1.48 GHz on an H200, where the timed benchmarks run at up to
1.98): a kernel bound by issue gains from the higher clock and one bound by memory latency does not, so two
kernels can trade places between ncu's durations and the benchmarks'. The norms' row kernel was ahead of
Inductor's under ncu at T = 16-128 and behind it in the benchmarks; the clock is one candidate, not yet
checked. Add ``--clock-control none`` to compare them at the clock the benchmarks see.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

import rapid_llm.kernels as K
from rapid_llm.bench.ops import make_args
from rapid_llm.kernels import platform
from rapid_llm.kernels.inspection.profiling import profile_one_call
from rapid_llm.kernels.ops.norm.rms_norm import reference as rms_norm_reference
from rapid_llm.kernels.registry import spec


def _native(op: str):
    return spec.native_row(op).load()


def implementations(op: str, rows: Sequence[str], dynamic: bool | None = False) -> dict[str, object]:
    """label -> callable: the dispatched op, each named row, and torch.compile of the native row (``dynamic``:
    torch.compile's argument)."""
    found = {f"K.{op}": getattr(K, op)}
    for name in rows:
        row = spec.get_row(name)
        if row.op == op:
            found[name] = row.load()
    found["torch.compile"] = torch.compile(_native(op), dynamic=dynamic)
    return found


#: ncu's metrics (its --page details names) that tell a latency- or occupancy-bound norm from a bandwidth-bound one.
SUMMARY = ("Duration", "Grid Size", "Block Size", "Registers Per Thread", "Theoretical Occupancy", "Achieved Occupancy",
           "DRAM Throughput", "L1/TEX Hit Rate", "L2 Hit Rate", "Active Warps Per Scheduler", "SM Frequency")


def summarize(csv_text: str) -> str:
    """One line per profiled kernel, in launch order, of ncu's ``--page details --csv`` export: the SUMMARY
    metrics, so a run's reports can be read (and committed) as text."""
    import csv
    import io

    kernels: dict[str, dict[str, str]] = {}
    names: dict[str, str] = {}
    for r in csv.DictReader(io.StringIO(csv_text)):
        if r.get("Metric Name") in SUMMARY:
            kernels.setdefault(r["ID"], {})[r["Metric Name"]] = f"{r['Metric Value']} {r['Metric Unit']}".strip()
            names[r["ID"]] = r["Kernel Name"].split("(")[0].removeprefix("void ")
    lines = []
    for kid in sorted(kernels, key=int):
        m = kernels[kid]
        lines.append(f"[{kid}] {names[kid]}\n    " + " | ".join(f"{k} {m[k]}" for k in SUMMARY if k in m))
    return "\n".join(lines)


def norm_case(op: str, tokens: int, hidden: int, dtype: torch.dtype, device: torch.device) -> tuple[tuple, dict]:
    """A norm's call at another model's hidden size (``--hidden``): x [tokens, hidden] and its weight (and a
    residual for fused_add_rms_norm), drawn as the bench case draws them."""
    if op not in ("rms_norm", "fused_add_rms_norm"):
        raise SystemExit(f"profile_vs_compile: --hidden applies to rms_norm and fused_add_rms_norm, not {op}")
    x, weight = rms_norm_reference.bench_inputs(tokens, dtype, device, hidden)
    if op == "rms_norm":
        return (x, weight, rms_norm_reference.EPS), {}
    return (x, torch.empty_like(x).normal_(), weight, rms_norm_reference.EPS), {}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", nargs="+", default=["rms_norm", "fused_add_rms_norm", "silu_and_mul"])
    p.add_argument("--tokens", nargs="+", type=int, default=[1, 16, 128])
    p.add_argument("--rows", nargs="*", default=[], help="rows to profile beside the dispatched op (any op's)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--print-code", action="store_true", help="print the Triton source Inductor generated")
    p.add_argument("--compile-dynamic", choices=["false", "auto"], default="false",
                   help="false: a kernel per T; auto: torch's default, dynamic from the second T (the peer benchmark)")
    p.add_argument("--hidden", type=int, default=None,
                   help="the norms' hidden size (default: the bench case's), e.g. 2048 or 8192")
    p.add_argument("--summarize", metavar="CSV", default=None,
                   help="print the SUMMARY metrics of ncu's 'ncu --import R --page details --csv' export (- for "
                        "stdin) and exit: no GPU needed")
    args = p.parse_args(argv)
    if args.summarize is not None:
        import sys
        from pathlib import Path

        print(summarize(sys.stdin.read() if args.summarize == "-" else Path(args.summarize).read_text()))
        return 0
    if not torch.cuda.is_available():
        print("profile_vs_compile: needs a CUDA device")
        return 2
    device = torch.device("cuda")
    dtype = platform.torch_dtype(args.dtype)
    for op in args.ops:
        per_token = spec.get_decl(op).token_numel
        impls = implementations(op, args.rows, dynamic=False if args.compile_dynamic == "false" else None)
        for t in args.tokens:
            if args.hidden is None:
                case = make_args(op, t * per_token, dtype, device)
                call_args, kwargs = case.args, {k: v for k, v in case.kwargs.items() if k != "out"}
            else:
                call_args, kwargs = norm_case(op, t, args.hidden, dtype, device)
            for label, fn in impls.items():
                if label == "torch.compile" and args.print_code and t == args.tokens[0]:
                    from torch._inductor.utils import run_and_get_code
                    _, code = run_and_get_code(fn, *call_args, **kwargs)
                    print(f"== {op} T={t}: Inductor's code ==\n" + "\n".join(code))
                for _ in range(3):
                    fn(*call_args, **kwargs)
                chosen = K.explain(op, *call_args).chosen.name if label.startswith("K.") else label
                profile_one_call(fn, f"{op} T={t} {label}", *call_args, **kwargs)
                print(f"profiled {op} T={t} {label} ({chosen})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
