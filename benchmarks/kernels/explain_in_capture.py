"""What dispatch picks for each LLM op eagerly and inside a CUDA-graph capture, and why (explain).

    python benchmarks/kernels/explain_in_capture.py [--ops rms_norm ...] [--tokens 128] [--dtype bf16]

For each op that declares ``token_numel``, on its bench case at T tokens: one eager ``K.<op>`` call (the
caller's rule: what an eager caller pays), ``explain`` of that call, then the same call captured into a CUDA
graph with ``explain`` taken inside the capture (the device-time rule), and the graph replayed and checked
against the eager result. An op that declares other forms (scaled_fp8_quant) then gets, per form, the row each
rule picks at every benchmarked T, with explain's reason for the device rule's pick and the T where it changes
(the CUDA/Triton crossover). The figures both rules read are the committed results files of this GPU.
"""
from __future__ import annotations

import argparse

import torch

import rapid_llm.kernels as K
from rapid_llm.bench.ops import make_args
from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch.dispatcher import RowVerdict
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


#: The token counts bench_llm_ops.py records (its TOKENS): the buckets the committed figures cover.
FORM_TOKENS = (1, 2, 4, 16, 64, 256, 1024, 4096, 16384)


def _cell(verdict: RowVerdict) -> str:
    return f"{verdict.name} {verdict.measured_text}"


def form_table(op: str, dtype: str, device: torch.device) -> None:
    """Per form of ``op``: the row each rule picks at every recorded T, and where the device rule's pick changes."""
    decl = spec.get_decl(op)
    for form in decl.forms:
        print(f"\n== {op}, form {form!r}: the row each rule picks (explain, committed figures) ==")
        print(f"{'T':>6}  {'eager caller (host or device time)':<40} {'capture / compiled (device time)':<36} why")
        before = None
        for t in FORM_TOKENS:
            numel = t * (decl.token_numel or 1)  # an op without token_numel: T elements
            eager = K.explain(op, dtype=dtype, device=device, numel=numel, form=form).chosen
            inside = K.explain(op, dtype=dtype, device=device, numel=numel, form=form, rule="device").chosen
            mark = f"  <- crossover from {before}" if before is not None and inside.name != before else ""
            before = inside.name
            print(f"{t:>6}  {_cell(eager):<40} {_cell(inside):<36} {inside.reason}{mark}")


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
    for op in ops:
        if spec.get_decl(op).forms:
            form_table(op, args.dtype, device)


if __name__ == "__main__":
    main()
