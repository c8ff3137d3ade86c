"""The floor for fused_add_rms_norm: plain torch, runs on every device, dtype and layout."""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.ops.norm.rms_norm.native import check_eps, check_weight, normalized
from rapid_llm.kernels.platform import must_match


def check_residual(op: str, x: torch.Tensor, residual: torch.Tensor) -> None:
    a.tensor(op, "residual", residual)
    if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(must_match(op, "residual", residual, "x", x))


def check(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """fused_add_rms_norm's argument checks, every path's: x and residual are both written, so neither may
    share memory with the other or with weight."""
    op = "fused_add_rms_norm"
    a.tensor(op, "x", x)
    a.tensor(op, "residual", residual)
    check_weight(op, x, weight)
    check_residual(op, x, residual)
    check_eps(op, eps)
    a.no_overlap(op, {"x": x, "residual": residual}, {"weight": weight})


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: residual += x, then x = rms_norm(residual, weight, eps). Returns None.

    Numerics, shared by every row: the sum x + residual is formed in fp32 and
    written to residual rounded once to the input dtype; the normalisation uses
    that fp32 sum, not the rounded residual: its sum of squares is accumulated
    in fp32, and the normalised value is multiplied by the weight in fp32 and
    rounded once into x. x, residual and weight share a dtype and device;
    weight is [hidden].
    """
    check(x, residual, weight, eps)
    total = x.float() + residual.float()  # a new fp32 tensor even when x is fp32
    residual.copy_(total)
    x.copy_(normalized(total, weight, eps))


fused_add_rms_norm.check = check
