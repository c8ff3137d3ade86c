"""The sampler's random numbers: a counter-based hash of (seed, offset, row), the one every row computes.

A draw must not depend on which row computed it, on the device or on how the batch was split, so no row keeps
generator state: row ``r`` of a call with ``seed_offset = (seed, offset)`` takes 53 random bits from
``bits53(seed, offset, r)``, a fixed function in uint32 arithmetic that plain torch (int64 holding uint32
values: both multipliers are below 2^31, so no product overflows), Triton (uint32) and CUDA (uint32_t) compute
alike. A caller advances ``offset`` for each new step, as with vLLM's and FlashInfer's philox offset.

    mix(h)  = h ^= h >> 16; h *= 0x21F0AAAD; h ^= h >> 15; h *= 0x735A2D97; h ^= h >> 15   (mod 2^32)
    key     = mix(mix(mix(mix(mix(seed_hi ^ 0x85EBCA6B) ^ seed_lo) ^ offset_hi) ^ offset_lo) ^ row)
    bits53  = (mix(key ^ 0x68E31DA4) << 21) | (mix(key ^ 0xB5297A4D) >> 11)

(``lo`` / ``hi``: the low and high 32 bits of the int64; ``row`` the row index, below 2^32.) The uniform
number is ``bits53 * 2^-53`` in [0, 1), exact in float64.
"""
from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
MUL1, MUL2 = 0x21F0AAAD, 0x735A2D97
SEED_SALT, DRAW_SALT_HI, DRAW_SALT_LO = 0x85EBCA6B, 0x68E31DA4, 0xB5297A4D


def mix32(h: torch.Tensor) -> torch.Tensor:
    """The 32-bit mixer on int64 tensors holding values in [0, 2^32)."""
    h = h ^ (h >> 16)
    h = (h * MUL1) & MASK32
    h = h ^ (h >> 15)
    h = (h * MUL2) & MASK32
    return h ^ (h >> 15)


def bits53(seed_offset: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """53 random bits (int64) per row index in ``rows``, from ``seed_offset`` = int64 [2] (seed, offset)."""
    so = seed_offset.to(torch.int64)
    seed, offset = so[0], so[1]
    key = mix32(((seed >> 32) & MASK32) ^ SEED_SALT)
    key = mix32(key ^ (seed & MASK32))
    key = mix32(key ^ ((offset >> 32) & MASK32))
    key = mix32(key ^ (offset & MASK32))
    key = mix32(key ^ (rows.to(torch.int64) & MASK32))
    return (mix32(key ^ DRAW_SALT_HI) << 21) | (mix32(key ^ DRAW_SALT_LO) >> 11)
