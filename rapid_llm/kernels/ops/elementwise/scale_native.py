"""The floor for scale: plain torch, runs on every device and dtype."""
from __future__ import annotations

import torch


def scale(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = input * factor. torch computes half types in fp32 and rounds once, like the other rows."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"scale: input must be a tensor, got {type(input).__name__}")
    if out is None:
        out = torch.empty_like(input)
    elif out.shape != input.shape or out.dtype != input.dtype or out.device != input.device:
        raise ValueError(
            f"scale: out must match input shape/dtype/device, got {tuple(out.shape)} {out.dtype} {out.device}"
            f" vs {tuple(input.shape)} {input.dtype} {input.device}"
        )
    return torch.mul(input, factor, out=out)
