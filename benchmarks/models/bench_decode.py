"""One decode step of a small Llama-3-8B-shaped model, eager, compiled and from CUDA graphs; and the layer's two
forms under torch.compile(mode="reduce-overhead"), with whether Inductor formed its CUDA graphs for each.

    python benchmarks/models/bench_decode.py [--tokens 1 8 64 256] [--layers 4] [--out FILE.json]
    python benchmarks/models/bench_decode.py --layer-forms [--tokens 1 8 64 256]

The step (rapid_llm.models.decoder.LlamaDecoder; random bf16 weights, no downloads): token ids -> embedding ->
``--layers`` Llama-3-8B layers, each writing its paged KV cache (K.reshape_and_cache_flash) -> final norm -> LM
head (vocabulary 128256) -> a top-k / top-p draw per token (K.top_k_top_p_sampling: k 50, p 0.9, temperature
0.8). T is the batch of decode tokens, one per sequence. Arms:

- ``eager``; ``eager graph``: the eager step captured in a CUDA graph (torch.cuda.CUDAGraph, by the harness);
- ``compiled``: torch.compile(fullgraph=True) (a graph break fails the run); ``compiled graph``: that, captured;
- ``reduce-overhead``: torch.compile(fullgraph=True, mode="reduce-overhead"), whose CUDA-graph trees capture
  and replay by themselves (timed as plain calls); the run prints whether it formed graphs
  (rapid_llm.models.graph_checks.CudagraphWatch) and fails if it did not.

``--layer-forms`` times one layer (with its cache) under reduce-overhead in both forms: ``in place`` (vLLM's:
writes x and residual, so each call gets fresh copies of both, and Inductor skips CUDA graphs for the mutated
inputs) and ``graphable`` (``LlamaLayer(inplace=False)``: copies inside the graph, never writes its inputs).

Timing is the project's harness (rapid_llm.bench.bench: CUDA events, warm-up, median), warm L2 (the weights are
far past it). Shapes are compiled as torch.compile chooses (the first T static, later ones one dynamic graph);
reduce-overhead records one CUDA graph per T.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from rapid_llm.bench import bench
from rapid_llm.kernels import platform
from rapid_llm.models.decoder import LlamaDecoder
from rapid_llm.models.graph_checks import CudagraphWatch
from rapid_llm.models.llama import LLAMA3_8B, LlamaConfig, LlamaLayer

STEP_ARMS = ("eager", "eager graph", "compiled", "compiled graph", "reduce-overhead")
LAYER_ARMS = ("in place, reduce-overhead", "graphable, reduce-overhead")
VOCAB = 128256  # Llama-3's
BLOCK = 16
#: What a CPU run builds (a check of the script, not a figure): a test-sized model.
CPU_CONFIG = LlamaConfig()


def kv_blocks(tokens: Sequence[int]) -> int:
    """Blocks for the largest step's slots, plus one."""
    return -(-max(tokens) // BLOCK) + 1


def step_inputs(tokens: int, vocab: int, num_slots: int, cfg: LlamaConfig, device: torch.device) -> tuple:
    """(ids, positions, slot_mapping, top_k, top_p, temperature, seed_offset) for a step of ``tokens`` sequences."""
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.randint(0, vocab, (tokens,), generator=gen)
    positions = torch.randint(0, cfg.max_positions, (tokens,), generator=gen)
    slots = torch.randperm(num_slots, generator=gen)[:tokens]
    top_k = torch.full((tokens,), 50)
    top_p = torch.full((tokens,), 0.9)
    temperature = torch.full((tokens,), 0.8)
    seed_offset = torch.tensor([1234, 0])
    return tuple(t.to(device) for t in (ids, positions, slots, top_k, top_p, temperature, seed_offset))


def graph_breaks(fn: Callable[..., Any], *args: Any) -> str:
    """What Dynamo makes of fn: graphs and graph breaks (torch._dynamo.explain)."""
    found = torch._dynamo.explain(fn)(*args)
    reasons = "; ".join(str(b.reason).splitlines()[0] for b in found.break_reasons) or "none"
    return f"{found.graph_count} graph(s), {found.graph_break_count} graph break(s): {reasons}"


def _time(fn: Callable[..., Any], args: tuple, *, graph: bool, repeats: int, label: str) -> float:
    for _ in range(3):  # compiles, and reduce-overhead's warm-up and recording
        fn(*args)
    return bench(fn, *args, cold_l2=False, graph=graph, repeats=repeats, label=label).median_us


def run_step(tokens: Sequence[int], *, layers: int, dtype: torch.dtype, device: torch.device, repeats: int,
             arms: Sequence[str]) -> list[dict[str, Any]]:
    cfg, vocab = (LLAMA3_8B, VOCAB) if device.type == "cuda" else (CPU_CONFIG, 512)
    blocks = kv_blocks(tokens)
    model = LlamaDecoder.random(cfg, layers=layers, vocab=vocab, kv_blocks=blocks, block_size=BLOCK, dtype=dtype,
                                device=device)
    print(f"decode step: {layers} layer(s) of {'Llama-3-8B' if device.type == 'cuda' else 'a test-sized layer'}, "
          f"vocabulary {vocab}, {str(dtype).split('.')[-1]}, sampler {model.sampler_name}; "
          f"{platform.device_label(device)}, torch {torch.__version__}; us per step (median of {repeats})", flush=True)
    probe = step_inputs(8, vocab, blocks * BLOCK, cfg, device)
    if any(a != "eager" for a in arms):
        print(f"torch._dynamo.explain of the step at T=8: {graph_breaks(model, *probe)}", flush=True)
    calls: dict[str, tuple[Callable[..., Any], bool]] = {"eager": (model, False), "eager graph": (model, True)}
    if {"compiled", "compiled graph"} & set(arms):  # torch.compile imports Dynamo: only where an arm needs it
        compiled = torch.compile(model, fullgraph=True)
        calls.update({"compiled": (compiled, False), "compiled graph": (compiled, True)})
    if "reduce-overhead" in arms:
        calls["reduce-overhead"] = (torch.compile(model, fullgraph=True, mode="reduce-overhead"), False)
    rows = []
    for t in tokens:
        args = step_inputs(t, vocab, blocks * BLOCK, cfg, device)
        row: dict[str, Any] = {"tokens": t}
        for arm in arms:
            fn, graph = calls[arm]
            if arm == "reduce-overhead":
                with CudagraphWatch(device) as watch:
                    row[arm] = _time(fn, args, graph=graph, repeats=repeats, label=f"{arm} T={t}")
                row["reduce-overhead cudagraphs"] = watch.summary()
                if not watch.formed:
                    raise SystemExit(f"T={t}: reduce-overhead ran without CUDA graphs: {watch.summary()}")
            else:
                row[arm] = _time(fn, args, graph=graph, repeats=repeats, label=f"{arm} T={t}")
        rows.append(row)
        cells = "  ".join(f"{arm}: {row[arm]:9.1f} us" for arm in arms)
        print(f"T={t:4d}  {cells}" + (f"  | {row['reduce-overhead cudagraphs']}" if "reduce-overhead" in arms
                                       else ""), flush=True)
    return rows


def run_layer_forms(tokens: Sequence[int], *, dtype: torch.dtype, device: torch.device,
                    repeats: int) -> list[dict[str, Any]]:
    """One Llama-3-8B layer with its cache under reduce-overhead, in place (fresh input copies per call) and
    graphable; whether each formed CUDA graphs."""
    blocks = kv_blocks(tokens)
    forms = {inplace: LlamaLayer.random(LLAMA3_8B, dtype=dtype, device=device, kv_blocks=blocks, block_size=BLOCK,
                                        inplace=inplace) for inplace in (True, False)}
    in_place = torch.compile(forms[True], fullgraph=True, mode="reduce-overhead")
    graphable = torch.compile(forms[False], fullgraph=True, mode="reduce-overhead")
    calls = {LAYER_ARMS[0]: lambda p, x, r, s: in_place(p, x.clone(), r.clone(), s),  # it writes x and residual
             LAYER_ARMS[1]: graphable}
    print(f"Llama-3-8B layer with its KV-cache write, {str(dtype).split('.')[-1]}, {platform.device_label(device)}, "
          f"torch {torch.__version__}; us per layer call (median of {repeats})", flush=True)
    rows = []
    for t in tokens:
        gen = torch.Generator().manual_seed(t)
        args = (torch.randint(0, LLAMA3_8B.max_positions, (t,), generator=gen).to(device),
                torch.randn(t, LLAMA3_8B.hidden, generator=gen).to(device, dtype),
                torch.randn(t, LLAMA3_8B.hidden, generator=gen).to(device, dtype),
                torch.randperm(blocks * BLOCK, generator=gen)[:t].to(device))
        row: dict[str, Any] = {"tokens": t}
        for arm, fn in calls.items():
            with CudagraphWatch(device) as watch:
                row[arm] = _time(fn, args, graph=False, repeats=repeats, label=f"{arm} T={t}")
            row[f"{arm} cudagraphs"] = watch.summary()
        rows.append(row)
        a, b = LAYER_ARMS
        print(f"T={t:4d}  {a}: {row[a]:8.1f} us ({row[a + ' cudagraphs']})\n        {b}: {row[b]:8.1f} us "
              f"({row[b + ' cudagraphs']})  | in place over graphable: {row[a] / row[b]:.2f}x", flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64, 256], help="decode tokens per step (T)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--layer-forms", action="store_true", help="time the layer's two forms instead of the step")
    parser.add_argument("--arms", nargs="+", choices=STEP_ARMS, help="the step's arms (default: all on CUDA, "
                                                                     "eager on a CPU)")
    parser.add_argument("--device", default="cuda", help="cuda (the figures) or cpu (a check of the script)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path, help="write the figures as JSON (benchmarks/results/models/...)")
    args = parser.parse_args(argv)
    if min(args.tokens) < 1 or args.layers < 1:
        parser.error("--tokens and --layers must be >= 1")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_decode needs a CUDA device for its figures (CUDA graphs are what it times); --device cpu checks "
              "the script")
        return 2
    arms = args.arms or (STEP_ARMS if device.type == "cuda" else ("eager",))
    if device.type != "cuda" and (args.layer_forms or set(arms) - {"eager", "compiled"}):
        parser.error("CUDA graphs need --device cuda")
    if args.layer_forms or set(arms) - {"eager", "eager graph"}:
        torch._dynamo.config.recompile_limit = 64  # several compiled arms share one forward
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    started = time.perf_counter()
    if args.layer_forms:
        rows = run_layer_forms(args.tokens, dtype=dtype, device=device, repeats=args.repeats)
    else:
        rows = run_step(args.tokens, layers=args.layers, dtype=dtype, device=device, repeats=args.repeats, arms=arms)
    print(f"(whole run {time.perf_counter() - started:.0f} s, compiles included)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": platform.device_label(device), "torch": torch.__version__,
                                        "what": "layer forms" if args.layer_forms else f"decode step, {args.layers} "
                                        "layers", "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
