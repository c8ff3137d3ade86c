"""scaled_fp8_quant's float64 reference (inputs, oracle, edge cases), its comparison rule and bench cases.

A reference size ``n`` is per-token dynamic quantisation of [tokens, hidden] (ops.token_inputs' mapping: a
multiple of 4096 past 8192 is n // 4096 tokens of 4096, any other size one token of hidden n, 4097 a
tail past every vector width). The edge cases add the other forms (per tensor, 1x128 groups, static
scales) and what probes them: vLLM's hidden sizes (17, 1024-1026, 5137, 8193) at 1 and 7 tokens, all-zero
rows (the floor), a NaN and an infinity, values a static scale pushes past 448 (the clamp), tiny values
(fp8 subnormals), an unaligned start.

The op writes into its arguments, so ``call`` runs a row on fresh poisoned outputs and returns the fp8
values then the scales, as float64, flattened and concatenated; the oracle returns the same from x in
float64, its fp8 rounding exact (compare_modes.round_to_e4m3). The comparison is the quantised-output
mode: scales exact, values within one fp8 ulp, the count of 1-ulp values reported.
"""
from __future__ import annotations

from typing import Any

import torch

from rapid_llm.kernels.ops.token_inputs import BENCH_HIDDEN, randn, tokens_hidden
from rapid_llm.kernels.ops.quant.scaled_fp8_quant.native import FP8, FP8_MAX, MIN_SCALE, layout
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference
from rapid_llm.kernels.verification.compare_modes import QuantisedOutput, round_to_e4m3
from rapid_llm.kernels.verification.defects import copy_for_row, output_like

GROUP = 128
#: vLLM's test_fp8_quant.py hidden sizes and token counts (4096 tokens only on a GPU: tests/ops).
VLLM_HIDDEN = (17, 1024, 1025, 1026, 5137, 8193)
VLLM_TOKENS = (1, 7, 4096)


def outputs(x: torch.Tensor, groups: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty (out, scales) for x: ``groups`` None per tensor, else that many groups per token (1: per token)."""
    out = torch.empty(x.shape, dtype=FP8, device=x.device)
    shape = (1,) if groups is None else (*x.shape[:-1], groups)
    return out, torch.empty(shape, dtype=torch.float32, device=x.device)


def dynamic(x: torch.Tensor, groups: int | None = 1) -> tuple:
    out, scales = outputs(x, groups)
    return (out, x, scales, False)


def static(x: torch.Tensor, scales: torch.Tensor) -> tuple:
    return (torch.empty(x.shape, dtype=FP8, device=x.device), x, scales.to(device=x.device, dtype=torch.float32),
            True)


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    tokens, hidden = tokens_hidden(shape[0])
    return dynamic(randn((tokens, hidden), dtype, device, gen, 3.0))


def unaligned(t: torch.Tensor) -> torch.Tensor:
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    return view


def special_rows(hidden: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """An all-zero row (the floor scale), a row with a NaN (left out of amax, quantised to NaN), one with an
    infinity (scale inf: finite values to 0, the infinity to NaN), tiny values (fp8 subnormals), large ones."""
    rows = randn((6, hidden), torch.float32, torch.device("cpu"), gen)
    rows[0] = 0.0
    rows[1, hidden // 2] = float("nan")
    rows[2, hidden // 3] = float("inf")
    rows[3] *= 1e-3
    rows[4] *= 1e3
    return rows.to(dtype=dtype, device=device)


def _without_inf(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isinf(x), torch.full_like(x, 5.0), x)


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    def x_of(tokens: int, hidden: int, scale: float = 3.0) -> torch.Tensor:
        return randn((tokens, hidden), dtype, device, gen, scale)

    cases: list[tuple[str, tuple]] = []
    for hidden in VLLM_HIDDEN:
        for tokens in VLLM_TOKENS[:2]:
            # vLLM's inputs: uniform [0, 1) + 1e-6, every value positive
            x = (torch.rand((tokens, hidden), generator=gen) + 1e-6).to(dtype=dtype, device=device)
            cases.append((f"per token [{tokens}, {hidden}] rand (vLLM's matrix)", dynamic(x)))
    cases += [
        ("per tensor [7, 1025]", dynamic(x_of(7, 1025), None)),
        ("per tensor [3, 4096]", dynamic(x_of(3, 4096), None)),
        ("per tensor [1, 17] (one short row)", dynamic(x_of(1, 17), None)),
        ("per tensor [0, 64] (no tokens: the floor scale)", dynamic(x_of(0, 64), None)),
        ("1x128 groups [5, 4096]", dynamic(x_of(5, 4096), 4096 // GROUP)),
        ("1x128 groups [3, 1024], one group all zero", dynamic(x_of(3, 1024).index_fill_(1, torch.arange(
            128, 256, device=device), 0.0), 1024 // GROUP)),
        ("1x64 groups [4, 512]", dynamic(x_of(4, 512), 512 // 64)),
        ("groups of 24 [3, 96] (not a vector multiple in bf16)", dynamic(x_of(3, 96), 4)),
        ("1x128 groups [2, 3, 256] (leading dims)", dynamic(x_of(6, 256).view(2, 3, 256), 2)),
        ("per token [2, 3, 520] (leading dims)", dynamic(x_of(6, 520).view(2, 3, 520))),
        ("per token [4, 1] (hidden 1)", dynamic(x_of(4, 1))),
        ("per token [2, 20000] (past a register-resident row)", dynamic(x_of(2, 20000))),
        ("per token [3, 4096] unaligned start", dynamic(unaligned(x_of(3, 4096)))),
        ("per token special rows [6, 1024]", dynamic(special_rows(1024, dtype, device, gen))),
        ("per tensor special rows [6, 1024] minus the infinity",
         dynamic(_without_inf(special_rows(1024, dtype, device, gen)), None)),
        ("1x128 groups special rows [6, 1024]", dynamic(special_rows(1024, dtype, device, gen), 8)),
        ("static per tensor [7, 1025], scale 0.01 (values clamp at 448)",
         static(x_of(7, 1025), torch.tensor([0.01]))),
        ("static per tensor [3, 4096] with infinities, scale 0.5",
         static(x_of(3, 4096).index_fill_(1, torch.tensor([5, 77], device=device), float("inf")),
                torch.tensor([0.5]))),
        ("static per token [5, 1024]", static(x_of(5, 1024), torch.rand((5, 1), generator=gen) * 0.02 + 0.001)),
        ("static 1x128 groups [2, 4096]", static(x_of(2, 4096), torch.rand((2, 32), generator=gen) * 0.02 + 0.004)),
    ]
    return cases


def parts(out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> tuple[int, int]:
    """(fp8 values, scales) in a case's result."""
    return x.numel(), scales.numel()


def oracle(out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> torch.Tensor:
    """cat(fp8 values, scales), float64: the scale max(amax / 448, floor) rounded once to fp32, each value
    x / scale clamped to +-448 and rounded once to e4m3 (ties to even)."""
    n_groups, size = layout("scaled_fp8_quant", x.shape, scales.shape)
    groups = x.to(torch.float64).reshape(n_groups, size)
    if static:
        scale = scales.to(torch.float64).reshape(n_groups, 1)
    else:
        mags = groups.abs()
        mags = torch.where(torch.isnan(mags), torch.zeros_like(mags), mags)
        amax = mags.amax(-1, keepdim=True) if size else mags.new_zeros((n_groups, 1))
        scale = torch.clamp_min(amax / FP8_MAX, MIN_SCALE).to(torch.float32).to(torch.float64)
    q = (groups / scale).clamp(-FP8_MAX, FP8_MAX)  # clamp keeps NaN
    return torch.cat([round_to_e4m3(q).flatten(), scale.flatten()])


def call(fn, out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> torch.Tensor:
    """Run the row on a poisoned out (and poisoned scales unless static); return cat(values, scales) as float64."""
    out = output_like(out, name="out")
    scales = copy_for_row(scales, "scales") if static else output_like(scales, name="scales")
    result = fn(out, x, scales, static)
    if result is not None:
        raise TypeError(f"scaled_fp8_quant writes into out and scales and returns None, got {type(result).__name__}")
    return torch.cat([out.to(torch.float64).flatten(), scales.to(torch.float64).flatten()])


def bench_inputs(tokens: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty((tokens, BENCH_HIDDEN), dtype=dtype, device=device).normal_()


def _case(numel: int, dtype: torch.dtype, device: torch.device, groups: int | None, is_static: bool) -> CaseArgs:
    tokens = max(1, numel // BENCH_HIDDEN)
    x = bench_inputs(tokens, dtype, device)
    out, scales = outputs(x, groups)
    if is_static:
        scales.fill_(0.01)
    # an ideal kernel reads x once and writes out once, and its scales
    return CaseArgs((out, x, scales, is_static), {},
                    bytes_moved=x.numel() * (x.element_size() + 1) + scales.numel() * 4)


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """Dynamic per token: T = max(1, numel // 4096) tokens of hidden 4096 (the form dispatch ranks rows by)."""
    return _case(numel, dtype, device, 1, False)


def per_tensor_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    return _case(numel, dtype, device, None, False)


def group_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    return _case(numel, dtype, device, BENCH_HIDDEN // GROUP, False)


def static_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    return _case(numel, dtype, device, None, True)


#: The op's other forms (OpDecl.forms), each with its bench case at the declared one's shapes: a form's best
#: row may differ (one pass per token, two over the tensor), so dispatch ranks each by its own figures.
FORMS = {"dynamic per tensor": per_tensor_case, "dynamic 1x128 groups": group_case, "static per tensor": static_case}


def form_of(output: Any = None, x: Any = None, scales: Any = None, static: Any = False, *rest: Any,
            **kwargs: Any) -> str | None:
    """A call's form: a label of FORMS, or None for dynamic per token (the bench case's). Reads the scales'
    shape only (it runs on every call), and never raises: a bad call is the rows' checks to name."""
    shape = getattr(scales, "shape", None)
    if not shape:
        return None
    if len(shape) == 1 and shape[0] == 1:
        return "static per tensor" if static is True else "dynamic per tensor"
    return "dynamic 1x128 groups" if shape[-1] > 1 and static is not True else None


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases,
                      compare=QuantisedOutput(parts=parts, value_ulps=1, scale_ulps=0))
