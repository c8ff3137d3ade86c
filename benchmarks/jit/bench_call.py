"""Host cost per call of a fast-path launcher against the pybind build of the same kernel.

    python benchmarks/jit/bench_call.py [--numel 1024] [--pairs 5]

Arms, interleaved so machine drift hits all alike, each timed by the harness's
bench_host on the same 1024-element bf16 tensor with a preallocated out:
the fast-path module's scale (benchmarks/jit/kernels/fast/scale.cu), the
torch-extension module's scale (benchmarks/jit/kernels/torch/scale.cu, built
through torch's loader: about a minute the first time) and torch.mul(out=).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Sequence

import torch

from rapid_llm.bench import bench_host
from rapid_llm.kernels.toolchain import jit

HERE = Path(__file__).resolve().parent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numel", type=int, default=1024)
    parser.add_argument("--n", type=int, default=2000, help="calls per timed round")
    parser.add_argument("--pairs", type=int, default=5, help="interleaved measurements of every arm")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 2
    fast = jit.build_jit("bench_scale_fast", HERE / "kernels" / "fast" / "scale.cu")
    pybind = jit.build_jit("bench_scale_torch", HERE / "kernels" / "torch" / "scale.cu")
    x = torch.randn(args.numel, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    arms = {
        f"fast path ({fast.builder})": lambda: fast.module.scale(out, x, 2.0),
        f"pybind ({pybind.builder})": lambda: pybind.module.scale(out, x, 2.0),
        "torch.mul(out=)": lambda: torch.mul(x, 2.0, out=out),
    }
    samples: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(args.pairs):
        for name, fn in arms.items():
            # bench_host finds the device from its tensor arguments; the arm ignores it.
            samples[name].append(bench_host(lambda _x, fn=fn: fn(), x, n=args.n, label=name).median_us)
    print(f"host cost per call, scale of {args.numel} bf16 elements on {torch.cuda.get_device_name()} "
          f"(median of {args.pairs} interleaved rounds of {args.n} calls)")
    base = statistics.median(samples[next(iter(arms))])
    for name, vals in samples.items():
        med = statistics.median(vals)
        print(f"  {name:38} {med:6.2f} us  ({med / base:.2f}x the fast path; rounds: "
              f"{', '.join(f'{v:.2f}' for v in vals)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
