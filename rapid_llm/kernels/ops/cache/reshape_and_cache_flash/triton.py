"""Triton reshape_and_cache_flash: one program per token writes its key row, then its value row, into its slot.

Runs on CUDA tensors, and on CPU tensors under ``TRITON_INTERPRET=1`` (how CI checks this row without a GPU).
Takes any strides (key and value sliced out of a fused qkv, caches as the halves of one kv buffer). An fp8
cache gets ``x / scale`` (an IEEE division, ``div_rn``: Triton's ``/`` is not correctly rounded on a GPU) clamped
to +-448 and rounded to e4m3 (nearest, ties to even) in integer arithmetic on
the fp32 bits, stored as bytes: the interpreter's float32 -> fp8 cast is wrong (see scaled_fp8_quant's Triton
row), and this way both run the same rounding.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.cache.reshape_and_cache_flash.native import check_args

#: Elements of a token's row one block of a program holds at once.
BLOCK_ELEMENTS = 2048


@triton.jit
def _e4m3_bits(y):
    """fp32 ``y`` -> float8_e4m3fn bits (uint8 as int32): clamp to +-448, round to nearest even, NaN to 0x7F."""
    nan = y != y
    y = tl.minimum(tl.maximum(y, -448.0), 448.0)
    bits = y.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = tl.abs(y)
    mbits = mag.to(tl.int32, bitcast=True)
    # Normal e4m3 (|y| >= 2^-6): keep 3 of fp32's 23 mantissa bits, round the 20 dropped ones to even. The
    # exponent rebias (127 -> 7) is 120 << 23; a carry out of the mantissa moves the exponent, as it should.
    dropped = mbits & 0xFFFFF
    kept = (mbits - (120 << 23)) >> 20
    up = (dropped > 0x80000) | ((dropped == 0x80000) & ((kept & 1) == 1))
    normal = kept + up.to(tl.int32)
    # Subnormal (|y| < 2^-6): multiples of 2^-9; |y| * 512 is exact, and adding 2^23 rounds it to even.
    sub = ((mag * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    q = tl.where(mag >= 0.015625, normal, sub)
    return tl.where(nan, 0x7F, q | sign)


@triton.jit
def _write_row(src_ptr, src_t, src_h, src_d, dst_ptr, dst_h, dst_d, token, dst_row, scale_ptr, live, heads,
               head_size, FP8: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    if FP8:
        scale = tl.load(scale_ptr).to(tl.float32)
    for h0 in range(0, heads, BLOCK_H):
        h = (h0 + offs_h).to(tl.int64)
        for d0 in range(0, head_size, BLOCK_D):
            d = (d0 + offs_d).to(tl.int64)
            mask = (h < live)[:, None] & (d < head_size)[None, :]  # live: heads, or 0 for a token not written
            x = tl.load(src_ptr + token * src_t + h[:, None] * src_h + d[None, :] * src_d, mask=mask)
            dst = dst_ptr + dst_row + h[:, None] * dst_h + d[None, :] * dst_d
            if FP8:
                q = tl.math.div_rn(x.to(tl.float32), tl.full(x.shape, 0.0, tl.float32) + scale)  # IEEE, as every row
                tl.store(dst, _e4m3_bits(q).to(tl.uint8), mask=mask)
            else:
                tl.store(dst, x, mask=mask)


@triton.jit
def _cache_kernel(key_ptr, value_ptr, kc_ptr, vc_ptr, slot_ptr, ks_ptr, vs_ptr, heads, head_size, block_size,
                  num_slots, k_t, k_h, k_d, v_t, v_h, v_d, kc_b, kc_o, kc_h, kc_d, vc_b, vc_o, vc_h, vc_d,
                  FP8: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    valid = (slot >= 0) & (slot < num_slots)  # padding (-1), or out of range on CUDA: nothing written
    safe = tl.where(valid, slot, 0)
    block, offset = safe // block_size, safe % block_size
    live = tl.where(valid, heads, 0)  # a scalar & a block mask trips the interpreter: mask by a count instead
    _write_row(key_ptr, k_t, k_h, k_d, kc_ptr, kc_h, kc_d, token, block * kc_b + offset * kc_o, ks_ptr, live,
               heads, head_size, FP8, BLOCK_H, BLOCK_D)
    _write_row(value_ptr, v_t, v_h, v_d, vc_ptr, vc_h, vc_d, token, block * vc_b + offset * vc_o, vs_ptr, live,
               heads, head_size, FP8, BLOCK_H, BLOCK_D)


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor,
                            v_scale: torch.Tensor) -> None:
    """Write each token's key and value rows into its slot (contract: the native row's module docstring).

    A Triton row has no C++ launcher, so this wrapper is its launcher: it checks every argument first. No
    tokens, or an empty cache, returns without a launch.
    """
    g = check_args(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    arguments.runs_on("reshape_and_cache_flash", "Triton", ("cuda", "cpu"), key)
    if g.tokens == 0 or g.num_slots == 0 or g.heads * g.head_size == 0:
        return None
    kc = key_cache.view(torch.uint8) if g.fp8 else key_cache
    vc = value_cache.view(torch.uint8) if g.fp8 else value_cache
    block_d = min(triton.next_power_of_2(g.head_size), BLOCK_ELEMENTS)
    block_h = max(1, min(triton.next_power_of_2(g.heads), BLOCK_ELEMENTS // block_d))
    _cache_kernel[(g.tokens,)](
        key, value, kc, vc, slot_mapping, k_scale, v_scale, g.heads, g.head_size, g.block_size, g.num_slots,
        *key.stride(), *value.stride(), *kc.stride(), *vc.stride(),
        FP8=g.fp8, BLOCK_H=block_h, BLOCK_D=block_d,
    )
    return None
