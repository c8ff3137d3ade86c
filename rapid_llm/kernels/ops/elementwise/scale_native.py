"""The floor for scale: plain torch, runs on every device and dtype."""
from __future__ import annotations

import torch


def scale(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = input * factor, computed in fp32 for half types and rounded once, like the other rows.

    On CUDA torch.mul already does that (fp32 opmath, fp32 scalar). Its CPU
    kernels round the scalar to the half type first (0.7 becomes 0.69921875
    in bf16), so on CPU half types go through fp32 explicitly.
    """
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"scale: input must be a tensor, got {type(input).__name__}")
    if out is None:
        out = torch.empty_like(input)
    elif out.shape != input.shape or out.dtype != input.dtype or out.device != input.device:
        raise ValueError(
            f"scale: out must match input shape/dtype/device, got {tuple(out.shape)} {out.dtype} {out.device}"
            f" vs {tuple(input.shape)} {input.dtype} {input.device}"
        )
    if input.device.type == "cpu" and input.dtype in (torch.float16, torch.bfloat16):
        return out.copy_(input.float().mul_(factor))
    return torch.mul(input, factor, out=out)
