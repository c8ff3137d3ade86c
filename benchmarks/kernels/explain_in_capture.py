"""What dispatch picks for each LLM op eagerly and inside a CUDA-graph capture, and why (explain).

    python benchmarks/kernels/explain_in_capture.py [--ops rms_norm ...] [--tokens 128] [--dtype bf16]

For each op that declares ``token_numel``, on its bench case at T tokens: one eager ``K.<op>`` call (the
caller's rule: what an eager caller pays), ``explain`` of that call, then the same call captured into a CUDA
graph with ``explain`` taken inside the capture (the device-time rule), and the graph replayed and checked
against the eager result. The figures both rules read are the committed results files of this GPU.
"""
from __future__ import annotations

import argparse

import torch

import rapid_llm.kernels as K
from rapid_llm.bench.ops import make_args
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec


def _outputs(result: object, args: tuple) -> list[torch.Tensor]:
    """What a call produced: its returned tensors, else (in-place ops) its tensor arguments."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and result:
        return [t for t in result if isinstance(t, torch.Tensor)]
    return [a for a in args if isinstance(a, torch.Tensor)]


def explain_op(op: str, tokens: int, dtype: torch.dtype, device: torch.device) -> None:
    numel = tokens * spec.get_decl(op).token_numel
    case = make_args(op, numel, dtype, device)
    kwargs = {k: v for k, v in case.kwargs.items() if k != "out"}
    pristine = [a.clone() if isinstance(a, torch.Tensor) else a for a in case.args]

    def fresh() -> tuple:
        return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in pristine)

    eager_args = fresh()
    eager = [t.clone() for t in _outputs(getattr(K, op)(*eager_args, **kwargs), eager_args)]
    print(f"\n== {op} at T={tokens} ({numel} elements), eager call ==")
    print(K.explain(op, *eager_args))

    graph_args = fresh()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = getattr(K, op)(*graph_args, **kwargs)
        inside = K.explain(op, *graph_args)
    graph.replay()  # a capture records without running: graph_args still hold the eager call's inputs
    torch.cuda.synchronize()
    replayed = _outputs(result, graph_args)
    if len(replayed) != len(eager):
        raise SystemExit(f"{op}: the replay produced {len(replayed)} tensors, the eager call {len(eager)}")
    diff = max(((a.float() - b.float()).abs().max().item() if a.numel() else 0.0)
               for a, b in zip(replayed, eager))
    print(f"== {op} at T={tokens}, inside a CUDA-graph capture (the replay against the eager call: "
          f"max abs difference {diff:.3g}) ==")
    print(inside)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="+", help="default: every op that declares token_numel")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("explain_in_capture needs a CUDA device (a capture is a CUDA graph)")
    device = torch.device("cuda")
    ops = args.ops or [op for op in spec.all_ops() if spec.get_decl(op).token_numel is not None]
    print(f"{platform.device_label(device)}, torch {torch.__version__}, {args.dtype}, T={args.tokens}")
    for op in ops:
        explain_op(op, args.tokens, platform.torch_dtype(args.dtype), device)


if __name__ == "__main__":
    main()
