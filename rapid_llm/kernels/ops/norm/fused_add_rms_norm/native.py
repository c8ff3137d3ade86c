"""The floor for fused_add_rms_norm: plain torch, runs on every device, dtype and layout."""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops.norm.rms_norm.native import check_weight, normalized
from rapid_llm.kernels.platform import must_match


def check_residual(op: str, x: torch.Tensor, residual: torch.Tensor) -> None:
    if not isinstance(residual, torch.Tensor):
        raise TypeError(f"{op}: residual must be a tensor, got {type(residual).__name__}")
    if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(must_match(op, "residual", residual, "x", x))


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: residual += x, then x = rms_norm(residual, weight, eps). Returns None.

    Numerics, shared by every row: the sum x + residual is formed in fp32 and
    written to residual rounded once to the input dtype; the normalisation uses
    that fp32 sum, not the rounded residual: its sum of squares is accumulated
    in fp32, and the normalised value is multiplied by the weight in fp32 and
    rounded once into x. x, residual and weight share a dtype and device;
    weight is [hidden].
    """
    check_weight("fused_add_rms_norm", x, weight)
    check_residual("fused_add_rms_norm", x, residual)
    total = x.float() + residual.float()  # a new fp32 tensor even when x is fp32
    residual.copy_(total)
    x.copy_(normalized(total, weight, eps))
