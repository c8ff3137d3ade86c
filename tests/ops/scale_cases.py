"""Shared parameters for the scale row tests: dtype x size x factor."""
from __future__ import annotations

import torch

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# 0 and 1: edge shapes; 4097: one past a power of two (tail handling);
# 65536 + 3: several Triton blocks plus a ragged tail.
SIZES = [0, 1, 7, 4097, 65539]
FACTORS = [2.0, -0.375, 0.0, 1e-3]


def make_input(numel: int, dtype: torch.dtype, device: torch.device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(numel, generator=gen) * 4).to(dtype=dtype, device=device)
