"""An LLM op through dispatch beside Liger-Kernel's kernel for it, one call each, for ncu.

    ncu --profile-from-start off --set full -o OUT \\
        python benchmarks/kernels/profile_vs_liger.py --peer-bench PEER_DIR --ops rotary_embedding \\
        --model llama3-8b --tokens 1024 4096

The inputs, Liger's call (its preparation, such as rope's cos/sin gather, outside the profiled range) and the
model shapes are the peer benchmark's (peer_bench.py), so ncu reads the kernels that benchmark times. Each call
runs inside the profiled range after warm-up calls outside it, so ncu sees one launch of each. Summarize the
report with ``profile_vs_compile.py --summarize`` (its notes on ncu's locked clock apply here too).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.inspection.profiling import profile_one_call

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_bench  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-bench", required=True, help="the folder of the peer benchmark (its bench_peers.py)")
    p.add_argument("--ops", nargs="+", default=["rotary_embedding"],
                   choices=["rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding"])
    p.add_argument("--model", default="llama3-8b", choices=list(peer_bench.MODELS))
    p.add_argument("--tokens", nargs="+", type=int, default=[1024, 4096])
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_vs_liger: needs a CUDA device")
        return 2
    bp = peer_bench.load(args.peer_bench)
    peer_bench.set_model(bp, args.model)
    for op in args.ops:
        impls = {"K": peer_bench.call_for(bp, op, getattr(K, op))}
        liger = peer_bench.liger_impl(bp, op)
        if liger is None:
            raise SystemExit("profile_vs_liger: Liger-Kernel does not import here")
        prep, impls["liger"] = liger
        for t in args.tokens:
            state = bp.make_inputs(op, t, "cuda")
            if prep:
                prep(state)
            for label, fn in impls.items():
                for _ in range(3):
                    fn(state)
                profile_one_call(fn, f"{op} T={t} {label}", state)
                print(f"profiled {op} {args.model} T={t} {label}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
