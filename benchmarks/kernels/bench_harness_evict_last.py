"""Whether rapid_llm.bench's cold L2 holds against a row that loads its input with the L2 evict_last policy.

    python benchmarks/kernels/bench_harness_evict_last.py [--sizes-mib 1 8 32]

A memset flush leaves in L2 what a kernel loaded with ``evict_last`` (benchmarks/kernels/l2_flush.py), which
made torch.compile's reductions look faster in the peer benchmark. rapid_llm.bench does not flush: it rotates
argument sets that together exceed three times L2, so each set's lines have been pushed out by the others' by
the time it comes round again, whatever their priority. This times one Triton copy-and-scale kernel three ways
(its loads plain, ``evict_last``, ``evict_first``) through the harness, eagerly and as a CUDA graph: if the
rotation held, ``evict_last`` buys no reuse and moves the figure only as a cache policy moves a single pass.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable, Sequence

import torch


def copy_kernel() -> Any:
    """out = 2 * x with the load's eviction policy a compile-time choice (defined on first use)."""
    import triton
    import triton.language as tl

    @triton.jit
    def scale_copy(src, dst, n, POLICY: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=m, eviction_policy=POLICY) * 2.0, mask=m)

    return scale_copy


def row(policy: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    kernel = copy_kernel()

    def call(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        kernel[(-(-n // 2048),)](x, out, n, POLICY=policy, BLOCK=2048)
        return out

    return call


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mib", nargs="+", type=int, default=[1, 8, 32], help="x's size (fp32); out is the same")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_harness_evict_last: needs a CUDA device")
        return 2
    from rapid_llm.bench import bench

    for mib in a.sizes_mib:
        x = torch.randn((mib << 20) // 4, device="cuda")
        out = torch.empty_like(x)
        for graph in (False, True):
            cells = []
            for policy in ("", "evict_last", "evict_first"):
                r = bench(row(policy), x, out, bytes_moved=2 * x.nbytes, graph=graph)
                cells.append(f"{policy or 'plain'} {r.median_us:.2f} ({r.rotation_sets} sets)")
            print(f"{mib:3d} MiB fp32 x2 graph={graph}: " + "; ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
