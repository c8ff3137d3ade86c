"""Triton merge_attn_states: one program per token and block of heads, [heads, head_size] tiles.

The floor's contract (merge_attn_states_native), special values included: +-inf LSE is an empty side,
whose values are never read into the result; both empty gives 0 and -inf; a NaN LSE gives NaN. The
weights are divided with div_rn (Triton's plain fp32 division need not round correctly); exp and log are
Triton's (a few fp32 ulps, inside the fp32 tolerance). Runs on CUDA tensors, and on CPU tensors under
TRITON_INTERPRET=1.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.attention.merge_attn_states.native import check_args

#: Elements of a program's [heads, head_size] tile.
TILE = 2048


@triton.jit
def _merge_kernel(out_ptr, out_lse_ptr, va_ptr, lse_a_ptr, vb_ptr, lse_b_ptr, tokens, heads, head_size,
                  BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = h < heads
    lse_at = h.to(tl.int64) * tokens + t
    la = tl.load(lse_a_ptr + lse_at, mask=h_ok, other=0.0)
    lb = tl.load(lse_b_ptr + lse_at, mask=h_ok, other=0.0)
    nan = (la != la) | (lb != lb)
    a_empty = tl.abs(la) == float("inf")
    b_empty = tl.abs(lb) == float("inf")
    both = a_empty & b_empty
    a = tl.where(a_empty, float("-inf"), la)
    b = tl.where(b_empty, float("-inf"), lb)
    m = tl.where(both | nan, 0.0, tl.maximum(a, b))  # no -inf - -inf (nor NaN order questions) anywhere
    w_a = tl.exp(a - m)
    w_b = tl.exp(b - m)
    s = tl.where(both, 1.0, w_a + w_b)
    p_a = tl.math.div_rn(w_a, s)
    p_b = tl.math.div_rn(w_b, s)
    lse = tl.where(both, float("-inf"), m + tl.log(s))
    lse = tl.where(nan, float("nan"), lse)
    tl.store(out_lse_ptr + lse_at, lse, mask=h_ok)

    d = tl.arange(0, BLOCK_D)
    mask = h_ok[:, None] & (d[None, :] < head_size)
    offs = (t * heads + h.to(tl.int64))[:, None] * head_size + d[None, :]
    va = tl.load(va_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    vb = tl.load(vb_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    merged = va * p_a[:, None] + vb * p_b[:, None]
    merged = tl.where(b_empty[:, None], va, merged)
    merged = tl.where(a_empty[:, None], tl.where(b_empty[:, None], 0.0, vb), merged)
    merged = tl.where(nan[:, None], float("nan"), merged)
    tl.store(out_ptr + offs, merged.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


def merge_attn_states(output: torch.Tensor, output_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor,
                      v_b: torch.Tensor, lse_b: torch.Tensor) -> None:
    """The floor's contract on dense tensors; this wrapper is the row's launcher and checks what a wrong pointer
    would turn into silent corruption (shapes, dtypes, devices, density)."""
    out, out_lse = output, output_lse
    check_args("merge_attn_states", out, out_lse, v_a, lse_a, v_b, lse_b)
    arguments.runs_on("merge_attn_states", "Triton", ("cuda", "cpu"), v_a)
    for name, t in (("output", out), ("output_lse", out_lse), ("v_a", v_a), ("lse_a", lse_a), ("v_b", v_b),
                    ("lse_b", lse_b)):
        if not t.is_contiguous():
            raise ValueError(f"merge_attn_states: contiguous tensors only, {name} is a strided view {list(t.shape)}")
    tokens, heads, head_size = v_a.shape
    if v_a.numel() == 0:
        return
    block_d = triton.next_power_of_2(head_size)
    block_h = max(1, min(triton.next_power_of_2(heads), TILE // block_d))
    warps = max(1, min(8, block_h * block_d // 256))
    _merge_kernel[(tokens, triton.cdiv(heads, block_h))](out, out_lse, v_a, lse_a, v_b, lse_b, tokens, heads,
                                                         head_size, BLOCK_H=block_h, BLOCK_D=block_d,
                                                         num_warps=warps)
