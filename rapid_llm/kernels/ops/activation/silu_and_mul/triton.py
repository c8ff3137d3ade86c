"""Triton silu_and_mul: out = silu(x[..., :I]) * x[..., I:], one [ROWS, BLOCK] tile per program.

Runs on CUDA tensors, and on CPU tensors under ``TRITON_INTERPRET=1`` (how CI
checks this row for real without a GPU). x and out are addressed through their
row strides (spec.row_stride), so ``x = randn(T, 4I)[:, :2I]`` (vLLM's strided
case) runs without a copy; the row declares layouts ("contiguous", "rows").
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.activation.silu_and_mul.native import check_args
from rapid_llm.kernels.registry.spec import row_stride

#: Elements per program: a long row is split in BLOCK-wide chunks, short rows are stacked ROWS high.
TILE = 2048
MAX_BLOCK = 2048


@triton.jit
def _silu_and_mul_kernel(out_ptr, x_ptr, tokens, inner, x_stride, out_stride, ROWS: tl.constexpr,
                         BLOCK: tl.constexpr, LIBDEVICE: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = (rows < tokens) & (cols < inner)
    # int64 offsets: tokens * row stride can pass 2^31 elements.
    a_ptrs = x_ptr + rows * x_stride + cols
    a = tl.load(a_ptrs, mask=mask).to(tl.float32)
    b = tl.load(a_ptrs + inner, mask=mask).to(tl.float32)
    # The native row's fp32 recipe: a / (1 + exp(-a)) with an accurate expf and IEEE division (tl's "/"
    # on fp32 is div.full, 2 ulp). On a GPU that is libdevice's expf, the one torch's silu calls (tl.exp
    # there is ex2.approx, whose error grows with |a|). The interpreter cannot run libdevice, and numpy's
    # fp32 exp is up to ~3 ulp off, so there exp is taken in fp64 and rounded to fp32.
    if LIBDEVICE:
        e = libdevice.exp(-a)
    else:
        e = tl.exp(-(a.to(tl.float64))).to(tl.float32)
    y = tl.math.div_rn(a, 1.0 + e) * b
    tl.store(out_ptr + rows * out_stride + cols, y.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


def _row_stride(name: str, t: torch.Tensor) -> int:
    stride = row_stride(t)
    if stride is None:
        raise ValueError(f"silu_and_mul: {name} must have a contiguous last dim and one row stride, got a strided "
                         f"view {list(t.shape)} with strides {list(t.stride())}")
    return stride


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = silu(x[..., :I]) * x[..., I:], the native row's fp32 recipe; an empty input launches nothing.

    A Triton row has no C++ launcher, so this wrapper is its launcher: it
    checks what a wrong pointer would otherwise turn into silent corruption.
    """
    inner = check_args(x, out)
    arguments.runs_on("silu_and_mul", "Triton", ("cuda", "cpu"), x)
    if out is None:
        out = torch.empty((*x.shape[:-1], inner), dtype=x.dtype, device=x.device)
    x_stride, out_stride = _row_stride("x", x), _row_stride("out", out)
    if out.numel() == 0:
        return out
    tokens = out.numel() // inner
    block = min(triton.next_power_of_2(inner), MAX_BLOCK)
    rows = max(1, TILE // block)
    grid = (triton.cdiv(tokens, rows), triton.cdiv(inner, block))
    _silu_and_mul_kernel[grid](out, x, tokens, inner, x_stride, out_stride, ROWS=rows, BLOCK=block,
                               LIBDEVICE=x.is_cuda)
    return out
