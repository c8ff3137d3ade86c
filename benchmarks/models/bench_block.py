"""A Llama-3-8B decoder layer in four arms: native ops eager, K ops eager, native compiled, K compiled.

    python benchmarks/models/bench_block.py [--decode 1 2 4 8 16] [--prefill 4096 16384] [--out FILE.json]

The layer is rapid_llm.models.llama.LlamaLayer (rms_norm, qkv projection, rotary_embedding, SDPA,
o projection, fused_add_rms_norm, gate/up, silu_and_mul, down; random bf16 weights, no downloads), the
same module in every arm; only its four ops differ: the native floors (plain torch, what a user would
write) or ``K``'s dispatching ops. The compiled arms are ``torch.compile(dynamic=True)`` of each
(``fullgraph=True`` for K: a graph break fails the run).

Decode token counts are timed as CUDA-graph replays (what a serving engine does at decode: host cost
drops out, device time remains), two ways: a manual capture of each arm (``torch.cuda.graph`` around the
module, eager and compiled alike) and, for the compiled arms, ``torch.compile(mode="reduce-overhead")``,
whose CUDA-graph trees capture and replay by themselves. Prefill counts are timed eagerly. Every call starts from fresh copies
of the layer input and the residual (the layer writes both in place), in every arm alike. The weights
(436 MiB) are far past L2, so no extra cold-L2 rotation is needed. Timing is the project's harness
(rapid_llm.bench.bench: CUDA events, warm-up, median).

The headline comparison, K compiled against native compiled, is also taken in interleaved pairs
(``--pairs``: A B / B A rounds of a few calls each, through the same harness) and summarised by
rapid_llm.bench.paired_stats: the ratio with its 95 % interval and a verdict, so "as fast as" means
"not slower at 95 % confidence", not two medians from different minutes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from rapid_llm.bench import bench, paired_stats
from rapid_llm.kernels import platform
from rapid_llm.models.llama import LLAMA3_8B, LlamaLayer, native_ops

ARMS = ("native eager", "K eager", "native compiled", "K compiled")
#: Decode only: torch.compile's own CUDA graphs (timed as plain calls: each call is a replay).
REDUCE_OVERHEAD = ("native reduce-overhead", "K reduce-overhead")


def make_arms(dtype: torch.dtype, device: torch.device) -> dict[str, Callable[..., Any]]:
    native = LlamaLayer.random(LLAMA3_8B, dtype=dtype, device=device, ops=native_ops())
    ours = LlamaLayer.random(LLAMA3_8B, dtype=dtype, device=device)  # the same seed: the same weights
    return {
        "native eager": native,
        "K eager": ours,
        "native compiled": torch.compile(native, dynamic=True),
        "K compiled": torch.compile(ours, dynamic=True, fullgraph=True),
    }


def make_reduce_overhead_arms(dtype: torch.dtype, device: torch.device) -> dict[str, Callable[..., Any]]:
    """The compiled arms under torch.compile's CUDA graphs: static shapes (one graph per token count).

    The layer writes its input and residual in place, and CUDA-graph trees skip a graph whose inputs are
    mutated; so what is compiled is the call with its fresh copies (the copies every arm pays), and the
    layer's writes land in buffers the graph owns.
    """
    native = LlamaLayer.random(LLAMA3_8B, dtype=dtype, device=device, ops=native_ops())
    ours = LlamaLayer.random(LLAMA3_8B, dtype=dtype, device=device)

    def with_copies(layer: LlamaLayer) -> Callable[..., Any]:
        def call(positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor) -> Any:
            return layer(positions, x.clone(), residual.clone())
        return call

    return {
        "native reduce-overhead": torch.compile(with_copies(native), mode="reduce-overhead"),
        "K reduce-overhead": torch.compile(with_copies(ours), mode="reduce-overhead", fullgraph=True),
    }


def inputs(tokens: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(tokens)
    positions = torch.randint(0, LLAMA3_8B.max_positions, (tokens,), generator=gen).to(device)
    x = torch.randn(tokens, LLAMA3_8B.hidden, generator=gen).to(device=device, dtype=dtype)
    residual = torch.randn(tokens, LLAMA3_8B.hidden, generator=gen).to(device=device, dtype=dtype)
    return positions, x, residual


def graph_breaks(layer: torch.nn.Module, tokens: int, dtype: torch.dtype, device: torch.device) -> str:
    """What Dynamo makes of the layer: its graphs and graph breaks (torch._dynamo.explain)."""
    import torch._dynamo as dynamo

    positions, x, residual = inputs(tokens, dtype, device)
    found = dynamo.explain(layer)(positions, x, residual)
    reasons = "; ".join(str(b.reason).splitlines()[0] for b in found.break_reasons) or "none"
    return f"{found.graph_count} graph(s), {found.graph_break_count} graph break(s), {found.op_count} ops: {reasons}"


def run(tokens: Sequence[int], *, graph: bool, dtype: torch.dtype, device: torch.device,
        arms: dict[str, Callable[..., Any]], repeats: int,
        self_graphed: dict[str, Callable[..., Any]] | None = None, pairs: int = 0) -> list[dict[str, Any]]:
    """Time every arm at every token count; ``self_graphed`` arms replay their own graphs (no manual capture)."""
    rows = []
    for t in tokens:
        positions, x, residual = inputs(t, dtype, device)
        reference = None
        row: dict[str, Any] = {"tokens": t, "graph": graph}
        timed = [(arm, layer, graph, True) for arm, layer in arms.items()]
        timed += [(arm, layer, False, False) for arm, layer in (self_graphed or {}).items()]
        calls: dict[str, tuple[Callable[..., Any], bool]] = {}
        for arm, layer, manual, copies in timed:
            def call(positions, x, residual, layer=layer, copies=copies):
                return layer(positions, x.clone(), residual.clone()) if copies else layer(positions, x, residual)

            calls[arm] = (call, manual)

            for _ in range(3):  # reduce-overhead records its graph on the calls after the first
                out, res = call(positions, x, residual)
            if reference is None:
                reference = out.float()
            diff = (out.float() - reference).abs().max().item()
            scale = reference.abs().max().item()
            result = bench(call, positions, x, residual, cold_l2=False, graph=manual, repeats=repeats,
                           label=f"{arm} T={t}")
            row[arm] = {"median_us": result.median_us, "max_abs_diff_vs_native_eager": diff, "scale": scale}
        if pairs:
            row["paired"] = paired(calls, "native compiled", "K compiled", (positions, x, residual), pairs,
                                   repeats=max(3, repeats // 10), label=f"T={t}")
        rows.append(row)
        cells = "  ".join(f"{a}: {row[a]['median_us']:9.1f} us" for a, *_ in timed)
        ratios = f"{row['native compiled']['median_us'] / row['K compiled']['median_us']:.2f}x"
        if self_graphed:
            native_ro, ours_ro = (row[arm]["median_us"] for arm in REDUCE_OVERHEAD)
            ratios += f", reduce-overhead {native_ro / ours_ro:.2f}x"
        print(f"T={t:6d} {'graph' if graph else 'eager'}  {cells}  |  K compiled over native compiled: {ratios}",
              flush=True)
        if pairs:
            print(f"         paired, K compiled (B) against native compiled (A): {row['paired']['summary']}", flush=True)
    return rows


def paired(calls: dict[str, tuple[Callable[..., Any], bool]], a: str, b: str, args: tuple, pairs: int, *,
           repeats: int, label: str) -> dict[str, Any]:
    """B against A in interleaved rounds (A B, then B A), each a median of ``repeats`` calls; the paired estimate."""
    times: dict[str, list[float]] = {a: [], b: []}
    for i in range(pairs):
        for arm in ((a, b) if i % 2 == 0 else (b, a)):
            fn, manual = calls[arm]
            times[arm].append(bench(fn, *args, cold_l2=False, graph=manual, warmup=1, repeats=repeats,
                                    label=f"{arm} {label} pair {i}").median_us)
    est = paired_stats.estimate(times[a], times[b])
    return {"ratio_b_over_a": est.ratio, "ci95": [est.low, est.high], "pairs": est.pairs,
            "verdict": est.verdict, "summary": est.summary()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode", type=int, nargs="*", default=[1, 2, 4, 8, 16, 128],
                        help="token counts replayed from CUDA graphs (128: the top of where the elementwise ops matter)")
    parser.add_argument("--prefill", type=int, nargs="*", default=[4096, 16384])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=20,
                        help="interleaved rounds for K compiled against native compiled (0: none)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON (benchmarks/results/models/...)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_block needs a CUDA device: the compiled arms and CUDA-graph replay are what it times")
        return 2
    device, dtype = torch.device("cuda"), torch.bfloat16
    # Six compiled arms share LlamaLayer.forward, and Dynamo's recompile limit counts per code object: past it
    # an arm would silently run eagerly.
    torch._dynamo.config.recompile_limit = 64
    started = time.perf_counter()
    arms = make_arms(dtype, device)
    print(f"Llama-3-8B layer, bf16, {platform.device_label(device)}, torch {torch.__version__}; "
          f"us per layer call (median of {args.repeats})", flush=True)
    for arm in ("native eager", "K eager"):
        print(f"torch._dynamo.explain of the {arm.split()[0]} layer at T=16: "
              f"{graph_breaks(arms[arm], 16, dtype, device)}", flush=True)
    rows = run(args.decode, graph=True, dtype=dtype, device=device, arms=arms, repeats=args.repeats,
               self_graphed=make_reduce_overhead_arms(dtype, device), pairs=args.pairs)
    if args.prefill:
        # Fresh compiles for prefill: a dynamic graph first traced at a decode size keeps the kernels Inductor
        # chose for that size hint (its GEMM and attention configs for a handful of rows), which at T=4096
        # ran the compiled arms 2x slower than eager. An engine compiles its prefill shapes apart too.
        torch._dynamo.reset()
        arms = make_arms(dtype, device)
        rows += run(args.prefill, graph=False, dtype=dtype, device=device, arms=arms,
                    repeats=max(5, args.repeats // 5), pairs=args.pairs)
    print(f"(whole run {time.perf_counter() - started:.0f} s, compiles included)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": platform.device_label(device), "torch": torch.__version__,
                                        "config": "Llama-3-8B layer, bf16", "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
