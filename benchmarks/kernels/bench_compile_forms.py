"""Dispatch against torch.compile compiled two ways, timed with the peer benchmark's own timer.

    python benchmarks/kernels/bench_compile_forms.py --peer-bench PEER_DIR [--op rms_norm] [--model llama3-8b]
                                                     [--print-code] [--profile]

The peer benchmark compiles each op's plain torch once (``torch.compile(fn)``, torch's default) and calls it at
T = 1 first, so from the second T on it times Inductor's dynamic-shape kernel; profile_vs_compile.py times
another kernel (one compiled per T), as did the launch variants' round-robin harness (dynamic from another first
T; measured and dropped). This times, at each T of the peer benchmark, the op through dispatch (``K.<op>``),
torch.compile as the peer benchmark gets it (``compile_dynamic``) and torch.compile for that T alone (``compile_static``) with the peer benchmark's
``GpuTimer`` (cold L2, CUDA events, median of 40), in three passes whose order rotates, so a figure that moves
with its place in the order shows it. Nothing is warmed at a T before its first pass.
--print-code prints Inductor's code of the dynamic compile (at T = 1 and 16) and of two per-T ones;
--profile makes one profiled call of each at T = 16, 128 and 1024 instead of timing, for ncu
(``ncu --profile-from-start off ...``).
"""
from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rapid_llm.kernels.inspection.profiling import profile_one_call

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_bench  # noqa: E402  (the peer benchmark's loader, shapes and calls)

TOKENS = (1, 16, 128, 1024, 4096, 16384)


def _fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own: a torch.compile cache of its own."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-bench", required=True, help="the folder of the peer benchmark (its bench_peers.py)")
    p.add_argument("--op", default="rms_norm", choices=["rms_norm", "fused_add_rms_norm", "silu_and_mul",
                                                       "rotary_embedding"])
    p.add_argument("--model", default="llama3-8b", choices=list(peer_bench.MODELS))
    p.add_argument("--print-code", action="store_true")
    p.add_argument("--profile", action="store_true", help="one profiled call of each at T = 16, 128, 1024")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_compile_forms: needs a CUDA device")
        return 2
    import rapid_llm.kernels as K
    from torch._inductor.utils import run_and_get_code

    bp = peer_bench.load(a.peer_bench)
    peer_bench.set_model(bp, a.model)
    fn = bp.PLAIN[a.op]
    master = {t: bp.make_inputs(a.op, t, "cuda") for t in TOKENS}
    dynamic = peer_bench.call_for(bp, a.op, torch.compile(_fresh(fn)))
    for t in TOKENS:  # the peer benchmark's order: T = 1 first, so the kernel from T = 16 on is the dynamic one
        if a.print_code and t in (1, 16):
            _, code = run_and_get_code(dynamic, bp._clone(master[t]))
            print(f"== dynamic compile at T={t}\n" + "\n".join(code))
        for _ in range(3):
            dynamic(bp._clone(master[t]))
    static = {}
    for t in TOKENS:
        static[t] = peer_bench.call_for(bp, a.op, torch.compile(_fresh(fn), dynamic=False))
        if a.print_code and t in (128, 1024):
            _, code = run_and_get_code(static[t], bp._clone(master[t]))
            print(f"== static compile at T={t}\n" + "\n".join(code))
        for _ in range(3):
            static[t](bp._clone(master[t]))
    ours = peer_bench.call_for(bp, a.op, getattr(K, a.op))
    torch.cuda.synchronize()
    if a.profile:
        for t in (16, 128, 1024):
            for name, impl in (("K", ours), ("compile_dynamic", dynamic), ("compile_static", static[t])):
                state = bp._clone(master[t])
                impl(state)
                profile_one_call(impl, f"{a.op} T={t} {name}", state)
                print(f"profiled {a.op} T={t} {name}", flush=True)
        return 0
    timer = bp.GpuTimer("cuda", 40)
    print(f"{a.model} {a.op}: us per call, the peer benchmark's timer (cold L2, median of 40); three passes, "
          "order rotated")
    for t in TOKENS:
        impls = [("K", ours), ("compile_dynamic", dynamic), ("compile_static", static[t])]
        runs: dict[str, list[float]] = {name: [] for name, _ in impls}
        for rep in range(3):
            for name, impl in impls[rep:] + impls[:rep]:
                state = bp._clone(master[t])
                runs[name].append(timer.time(lambda: impl(state))["median_us"])  # noqa: B023 - called at once
        print(f"T={t:5d}: " + " | ".join(f"{n} {' '.join(f'{v:.2f}' for v in vs)}" for n, vs in runs.items()),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
