"""What programmatic dependent launch buys a decode step: CUDA-graph replays with and without it, in pairs.

    python benchmarks/models/bench_dependent_launch.py [--tokens 1 16 128] [--pairs 20] [--out FILE.json]

rapid_llm's CUDA rows of rms_norm, fused_add_rms_norm, silu_and_mul and rotary_embedding start their kernels
with ``rl::launch_dependent`` (rapid_llm.cuh): on sm_90 and newer a kernel may then begin while the kernel
before it on the stream finishes, and waits in-kernel for that one's writes. An eager caller's launch gap
hides the overlap; a CUDA graph, which is how an engine replays decode steps, does not. Two workloads, each
captured twice from the same module, once with dependent launches and once as plain launches
(``set_dependent_launch``; the choice is baked into a graph when it is captured), then replayed in
interleaved pairs through the project's harness (CUDA events, median; rapid_llm.bench.paired_stats for the
ratio, its 95 % interval and a verdict):

- ``layer``: the Llama-3-8B decoder layer with ``K`` ops, eager, as bench_block.py builds it. Its GEMMs and
  SDPA are torch's plain launches, so only the boundaries into the four ops can overlap.
- ``ops``: the four ops back to back on the layer's shapes (rms_norm, rotary_embedding, fused_add_rms_norm,
  silu_and_mul): every boundary is between two dependent launches.

It also times what an eager caller pays a call of each op at T = 1 (``bench_host``, the two launch modes in
interleaved rounds): a dependent launch goes through cuLaunchKernelEx rather than cuLaunchKernel.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

import rapid_llm.kernels as K
from bench_block import inputs, paired
from rapid_llm.bench import bench, bench_host
from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain.fastpath.binding import set_dependent_launch
from rapid_llm.models.llama import LLAMA3_8B, LlamaLayer

MODES = {"dependent": True, "plain": False}


def workloads(tokens: int, dtype: torch.dtype, device: torch.device, layer: LlamaLayer) -> dict[str, tuple]:
    """name -> (call, args): each call starts from fresh copies of what it writes in place."""
    cfg = LLAMA3_8B
    positions, x, residual = inputs(tokens, dtype, device)
    gen = torch.Generator().manual_seed(tokens + 1)
    q = torch.randn(tokens, cfg.q_size, generator=gen).to(device=device, dtype=dtype)
    k = torch.randn(tokens, cfg.kv_size, generator=gen).to(device=device, dtype=dtype)
    gate_up = torch.randn(tokens, 2 * cfg.intermediate, generator=gen).to(device=device, dtype=dtype)
    w = layer.input_norm
    cache = layer.cos_sin_cache

    def layer_call(positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor) -> Any:
        return layer(positions, x.clone(), residual.clone())

    def ops_call(positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor) -> Any:
        h = K.rms_norm(x, w, cfg.eps)
        qq, kk = q.clone(), k.clone()
        K.rotary_embedding(positions, qq, kk, cfg.head_dim, cache, True)
        xx, rr = x.clone(), residual.clone()
        K.fused_add_rms_norm(xx, rr, w, cfg.eps)
        return h, qq, xx, K.silu_and_mul(gate_up)

    return {"layer": (layer_call, (positions, x, residual)), "ops": (ops_call, (positions, x, residual))}


def with_mode(call: Callable[..., Any], on: bool) -> Callable[..., Any]:
    """The call with dependent launches set as ``on`` while it runs (and so while the harness captures it)."""
    def run(*args: Any) -> Any:
        before = set_dependent_launch(on)
        try:
            return call(*args)
        finally:
            set_dependent_launch(before)
    return run


def host_costs(layer: LlamaLayer, dtype: torch.dtype, device: torch.device, rounds: int) -> dict[str, dict]:
    """op -> median host us per eager call at T = 1 in each launch mode, interleaved rounds of 500 calls."""
    cfg = LLAMA3_8B
    positions, x, residual = inputs(1, dtype, device)
    q, k = x.new_zeros(1, cfg.q_size), x.new_zeros(1, cfg.kv_size)
    gate_up = x.new_zeros(1, 2 * cfg.intermediate)
    calls = {"rms_norm": (K.rms_norm, (x, layer.input_norm, cfg.eps)),
             "fused_add_rms_norm": (K.fused_add_rms_norm, (x, residual, layer.input_norm, cfg.eps)),
             "silu_and_mul": (K.silu_and_mul, (gate_up,)),
             "rotary_embedding": (K.rotary_embedding, (positions, q, k, cfg.head_dim, layer.cos_sin_cache, True))}
    out = {}
    for op, (fn, args) in calls.items():
        runs: dict[str, list[float]] = {mode: [] for mode in MODES}
        for r in range(rounds):
            for mode, on in (MODES.items() if r % 2 == 0 else reversed(MODES.items())):  # who goes first alternates
                runs[mode].append(bench_host(with_mode(fn, on), *args, n=500, label=f"{op} {mode}").median_us)
        out[op] = {f"{m}_host_us": statistics.median(v) for m, v in runs.items()}
        out[op]["dependent_minus_plain_us"] = statistics.median(d - p for d, p in zip(runs["dependent"], runs["plain"]))
        print(f"host  {op:20s} plain {out[op]['plain_host_us']:6.2f} us  dependent {out[op]['dependent_host_us']:6.2f} us"
              f"  (dependent - plain, median of {rounds} rounds: {out[op]['dependent_minus_plain_us']:+.2f} us)",
              flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="*", default=[1, 16, 128])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=20, help="graph replays per sample")
    parser.add_argument("--host-rounds", type=int, default=7, help="interleaved rounds of the host-cost timing")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_dependent_launch needs a CUDA device: it times CUDA-graph replays")
        return 2
    device, dtype = torch.device("cuda"), torch.bfloat16
    layer = LlamaLayer.random(LLAMA3_8B, dtype=dtype, device=device)
    print(f"Llama-3-8B shapes, bf16, {platform.device_label(device)}, torch {torch.__version__}; us per call "
          f"(a graph of 8 calls replayed, median of {args.repeats}); B = dependent launches, A = plain", flush=True)
    rows = []
    for t in args.tokens:
        for name, (call, call_args) in workloads(t, dtype, device, layer).items():
            outs = [with_mode(call, on)(*call_args) for on in MODES.values()]
            same = all(torch.equal(a, b) for a, b in zip(*outs))
            calls = {mode: (with_mode(call, on), True) for mode, on in MODES.items()}
            medians = {mode: bench(fn, *call_args, cold_l2=False, graph=True, repeats=args.repeats,
                                   label=f"{name} {mode} T={t}").median_us for mode, (fn, _) in calls.items()}
            est = paired(calls, "plain", "dependent", call_args, args.pairs, repeats=max(3, args.repeats // 4),
                         label=f"{name} T={t}")
            rows.append({"workload": name, "tokens": t, "outputs_equal": same,
                         **{f"{m}_median_us": v for m, v in medians.items()}, "paired": est})
            print(f"T={t:5d} {name:5s}  plain {medians['plain']:8.2f} us  dependent {medians['dependent']:8.2f} us  "
                  f"outputs equal: {same}  |  paired: {est['summary']}", flush=True)
    host = host_costs(layer, dtype, device, args.host_rounds)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": platform.device_label(device), "torch": torch.__version__,
                                        "rows": rows, "host": host}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
