"""Triton rotary_embedding: one program per token rotates its q heads, then its k heads, in place.

Runs on CUDA tensors, and on CPU tensors under ``TRITON_INTERPRET=1`` (how CI
checks this row for real without a GPU). Takes any strides: q and k are often
column slices of one fused qkv projection, whose token stride is not the row length.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.rope.rotary_embedding.checks import check_args

#: Elements of one head-block a program holds at once (x and y each): enough to keep loads in flight.
BLOCK_ELEMENTS = 2048


@triton.jit
def _mul_rn(a, b, PTX: tl.constexpr):
    """a * b rounded to fp32 by itself (PTX mul.rn.f32: never contracted into an FMA with the sum that
    follows, and no flush to zero), whatever compiles the kernel: Inductor drops the launch's
    enable_fp_fusion=False. The interpreter runs no PTX, and numpy never contracts."""
    if PTX:
        return tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return a * b


@triton.jit
def _rotate_heads(ptr, row, n_heads, stride_h, stride_e, cos, sin, half, live,
                  IS_NEOX: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_P: tl.constexpr, PTX: tl.constexpr):
    """Rotate the first 2*half elements of every head of one token's row, BLOCK_H heads at a time.

    ``live``: the pairs to rotate (half, or 0 when the token's position is out of range). Neox loads
    x and y as two contiguous runs; GPT-J loads its interleaved pairs as one contiguous run and
    splits it (two stride-2 loads were slower on an H200; so was loading each element's partner).
    """
    offs_h = tl.arange(0, BLOCK_H)
    offs_p = tl.arange(0, BLOCK_P)
    pair_mask = offs_p < live
    for h0 in range(0, n_heads, BLOCK_H):
        heads = (h0 + offs_h).to(tl.int64)
        head_mask = (heads < n_heads)[:, None]
        base = ptr + row + heads[:, None] * stride_h
        if IS_NEOX:
            mask = head_mask & pair_mask[None, :]
            x_ptrs = base + offs_p[None, :] * stride_e
            y_ptrs = base + (offs_p + half)[None, :] * stride_e
            x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
            y = tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32)
        else:
            offs_e = tl.arange(0, 2 * BLOCK_P)
            mask = head_mask & (offs_e < 2 * live)[None, :]  # pair i covers elements 2i and 2i+1
            xy_ptrs = base + offs_e[None, :] * stride_e
            xy = tl.load(xy_ptrs, mask=mask, other=0.0).to(tl.float32)
            x, y = tl.split(tl.reshape(xy, (BLOCK_H, BLOCK_P, 2)))
        c, s = cos[None, :], sin[None, :]
        x_new = _mul_rn(x, c, PTX) - _mul_rn(y, s, PTX)
        y_new = _mul_rn(y, c, PTX) + _mul_rn(x, s, PTX)
        if IS_NEOX:
            tl.store(x_ptrs, x_new.to(ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)
            tl.store(y_ptrs, y_new.to(ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)
        else:
            xy_new = tl.reshape(tl.join(x_new, y_new), (BLOCK_H, 2 * BLOCK_P))
            tl.store(xy_ptrs, xy_new.to(ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


@triton.jit
def _rope_kernel(pos_ptr, q_ptr, k_ptr, cache_ptr, n_q_heads, n_k_heads, half, max_pos, pos_stride,
                 q_stride_t, q_stride_h, q_stride_e, k_stride_t, k_stride_h, k_stride_e, cache_stride_p, cache_stride_e,
                 IS_NEOX: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_P: tl.constexpr, PTX: tl.constexpr):
    # int64 offsets: token * stride reaches past 2^31 elements at long contexts.
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token * pos_stride).to(tl.int64)
    valid = (pos >= 0) & (pos < max_pos)  # out of range: leave the token as it is, never read outside the cache
    live = tl.where(valid, half, 0)  # pairs to rotate (a scalar & a block mask trips the interpreter)
    cache_row = cache_ptr + tl.where(valid, pos, 0) * cache_stride_p
    offs_p = tl.arange(0, BLOCK_P)
    cache_mask = offs_p < live
    cos = tl.load(cache_row + offs_p * cache_stride_e, mask=cache_mask, other=0.0).to(tl.float32)
    sin = tl.load(cache_row + (offs_p + half) * cache_stride_e, mask=cache_mask, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, token * q_stride_t, n_q_heads, q_stride_h, q_stride_e, cos, sin, half, live,
                  IS_NEOX, BLOCK_H, BLOCK_P, PTX)
    _rotate_heads(k_ptr, token * k_stride_t, n_k_heads, k_stride_h, k_stride_e, cos, sin, half, live,
                  IS_NEOX, BLOCK_H, BLOCK_P, PTX)


def _head_strides(t: torch.Tensor, head_size: int) -> tuple[int, int, int]:
    """(token, head, element) strides of a [T, H*head_size] or [T, H, head_size] tensor."""
    if t.dim() == 3:
        return t.stride(0), t.stride(1), t.stride(2)
    return t.stride(0), head_size * t.stride(1), t.stride(1)


def rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    """Rotate q and k in place (contract and numerics: the native row's docstring); returns None.

    A Triton row has no C++ launcher, so this wrapper is its launcher: it checks
    every argument first. No tokens, or no heads, returns without a launch.
    """
    tokens, q_heads, k_heads, rot_dim = check_args(positions, q, k, head_size, cos_sin_cache, is_neox)
    arguments.runs_on("rotary_embedding", "Triton", ("cuda", "cpu"), q)
    if tokens == 0 or q_heads + k_heads == 0:
        return None
    half = rot_dim // 2
    block_p = triton.next_power_of_2(half)
    block_h = max(1, min(triton.next_power_of_2(max(q_heads, k_heads)), BLOCK_ELEMENTS // block_p))
    _rope_kernel[(tokens,)](
        positions, q, k, cos_sin_cache, q_heads, k_heads, half, cos_sin_cache.shape[0], positions.stride(0),
        *_head_strides(q, head_size), *_head_strides(k, head_size), cos_sin_cache.stride(0), cos_sin_cache.stride(1),
        IS_NEOX=is_neox, BLOCK_H=block_h, BLOCK_P=block_p, PTX=q.is_cuda,
        enable_fp_fusion=False,  # products rounded before the sum, as every row computes them (and _mul_rn)
    )
    return None
