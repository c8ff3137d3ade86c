"""rms_norm's float64 reference (inputs, oracle, edge cases) and its benchmark case.

A reference size ``n`` becomes a [tokens, hidden] pair: a multiple of 4096
past 8192 is ``n // 4096`` tokens of the benchmark's hidden size 4096, any
other size is one token of hidden ``n`` (4097: a tail past every vector width).
The edge cases add what those miss: several rows of an odd hidden size, a
hidden size too small for a full warp, one beyond what a CUDA row keeps in
registers, an unaligned start, leading dims, a larger eps, special rows, and
row-strided views (``x = randn(T, 2H)[:, :H]``, how vLLM and FlashInfer test
their norms), whose rows a row must read at the stride and whose gaps it must
not touch.

Tolerance: ``ulps = 4``. A half-type row rounds once from fp32, half an ulp of
its dtype, far inside that. An fp32 row has no final rounding to hide its fp32
steps: the sum of squares in another order than float64 (a few fp32 ulps at
worst, halved by the square root), rsqrt (CUDA's rsqrtf is within 2 ulps),
and the two products (half an ulp each). Measured, the native floor itself is
2.2 fp32 eps off at worst (CPU and H200 alike) and the Triton and CUDA rows
2.5, so the default of 2 would fail honest fp32 rows; 4 passes them and still
fails a row that accumulates in a half type.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops.token_inputs import BENCH_HIDDEN, randn, tokens_hidden
from rapid_llm.kernels.verification.defects import output_like
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference

EPS = 1e-6
#: Reference-size tolerance in units of the dtype's eps (the derivation is in the module docstring).
ULPS = 4.0


def make_weight(hidden: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """Weights around 1 with both signs present: a weight of exactly 1 would hide a missing multiply."""
    return randn((hidden,), dtype, device, gen, 0.5).add_(1.0)


def unaligned(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``t`` that starts one element into its storage (not 16-byte aligned)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    return view


def row_strided(t: torch.Tensor, width: int, gen: torch.Generator) -> torch.Tensor:
    """``t`` as the first ``t.shape[-1]`` columns of a [..., width] buffer of other random values: one row
    stride (``width``) over a contiguous last dim, like ``randn(T, 2H)[:, :H]``."""
    buf = randn((*t.shape[:-1], width), t.dtype, t.device, gen, 3.0)
    view = buf[..., :t.shape[-1]]
    view.copy_(t)
    return view


def special_rows(hidden: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """Rows that probe the arithmetic: all zeros (the output is 0, eps keeps it finite), values near fp16's
    maximum (their squares overflow a half type but not fp32), tiny values (eps dominates), a NaN and an
    infinity (both propagate as in float64), and one ordinary row."""
    rows = randn((6, hidden), torch.float32, torch.device("cpu"), gen)
    rows[0] = 0.0
    rows[1] = rows[1].sign() * 6.0e4
    rows[2] *= 1e-4
    rows[3, hidden // 2] = float("nan")
    rows[4, hidden // 3] = float("inf")
    return rows.to(dtype=dtype, device=device)


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    tokens, hidden = tokens_hidden(shape[0])
    return (randn((tokens, hidden), dtype, device, gen, 4.0), make_weight(hidden, dtype, device, gen), EPS)


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    def case(tokens: int, hidden: int, eps: float = EPS) -> tuple:
        return (randn((tokens, hidden), dtype, device, gen, 2.0), make_weight(hidden, dtype, device, gen), eps)

    x, w, eps = case(3, 4096)
    return [
        ("[3, 4097] (hidden not a multiple of any vector width)", case(3, 4097)),
        ("[5, 1001]", case(5, 1001)),
        ("[9, 8] (hidden smaller than a warp)", case(9, 8)),
        ("[4, 1] (hidden 1)", case(4, 1)),
        ("[1, 4096] (one token)", case(1, 4096)),
        ("[2, 20000] (hidden past a register-resident row)", case(2, 20000)),
        ("[3, 4096] unaligned start (storage offset 1)", (unaligned(x), w, eps)),
        ("[3, 4096] unaligned weight", (x, unaligned(w), eps)),
        ("[2, 3, 520] (leading dims)", (randn((2, 3, 520), dtype, device, gen), make_weight(520, dtype, device, gen),
                                        EPS)),
        ("[4, 256] eps 0.1 on small values", (randn((4, 256), dtype, device, gen, 0.1),
                                              make_weight(256, dtype, device, gen), 0.1)),
        ("special rows [6, 1024]", (special_rows(1024, dtype, device, gen), make_weight(1024, dtype, device, gen), EPS)),
        *strided_cases(dtype, device, gen),
    ]


def strided_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    """Row-strided x: the layout a ("contiguous", "rows") row takes (fused_add_rms_norm reuses these)."""
    def case(shape: tuple[int, ...], width: int) -> tuple:
        x = row_strided(randn(shape, dtype, device, gen, 2.0), width, gen)
        return (x, make_weight(shape[-1], dtype, device, gen), EPS)

    return [
        ("[5, 4096] row stride 8192 (x = randn(T, 2H)[:, :H], vLLM's strided case)", case((5, 4096), 8192)),
        ("[3, 1024] row stride 1025 (rows off the 16-byte grid)", case((3, 1024), 1025)),
        ("[2, 3, 520] rows of [2, 3, 1040] (leading dims, one row stride)", case((2, 3, 520), 1040)),
    ]


def oracle(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight, in float64."""
    x = x.to(torch.float64)
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * weight.to(torch.float64)


def call(fn, x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Call through a poisoned ``out=`` (rapid_llm.kernels.verification.defects.output_like): an unwritten element shows."""
    out = output_like(x)
    fn(x, weight, eps, out=out)
    return out


def bench_inputs(tokens: int, dtype: torch.dtype, device: torch.device,
                 hidden: int = BENCH_HIDDEN) -> tuple[torch.Tensor, torch.Tensor]:
    """x [tokens, hidden] ~ N(0, 1) and a weight around 1, drawn on ``device`` (no host-side copy of a large x)."""
    x = torch.empty((tokens, hidden), dtype=dtype, device=device).normal_()
    weight = torch.empty(hidden, dtype=dtype, device=device).normal_(1.0, 0.5)
    return x, weight


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """T = max(1, numel // 4096) tokens of hidden 4096; an ideal kernel reads x and weight once, writes out."""
    tokens = max(1, numel // BENCH_HIDDEN)
    x, weight = bench_inputs(tokens, dtype, device)
    esize = x.element_size()
    return CaseArgs((x, weight, EPS), {"out": torch.empty_like(x)},
                    bytes_moved=2 * tokens * BENCH_HIDDEN * esize + BENCH_HIDDEN * esize)


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases, ulps=ULPS)
