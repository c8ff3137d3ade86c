"""The floor for rms_norm: plain torch, runs on every device, dtype and layout."""
from __future__ import annotations

import torch

from rapid_llm.kernels.platform import describe, must_match


def check_weight(op: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    """weight is [hidden] of x's dtype and device: what every row of both norm ops requires."""
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        bad = x if not isinstance(x, torch.Tensor) else weight
        raise TypeError(f"{op}: x and weight must be tensors, got {type(bad).__name__}")
    if x.dim() < 1:
        raise ValueError(f"{op}: x must have a hidden dimension, got a 0-d tensor")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"{op}: weight must be [{x.shape[-1]}] (x's last dim), got {list(weight.shape)}")
    if weight.dtype != x.dtype:
        raise ValueError(f"{op}: weight must have x's dtype, got {describe(weight)} vs {describe(x)}")
    if weight.device != x.device:
        raise ValueError(f"{op}: weight must be on x's device, got {describe(weight)} vs {describe(x)}")


def check_out(op: str, out: torch.Tensor, x: torch.Tensor) -> None:
    """out has x's shape, dtype and device (any row stride: the rows that take one say so)."""
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(must_match(op, "out", out, "x", x))


def normalized(total: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 ``total / sqrt(mean(total^2) + eps) * weight``, the product formed in fp32 (not yet rounded)."""
    inv_rms = torch.rsqrt(total.square().mean(-1, keepdim=True) + eps)
    return total * inv_rms * weight.float()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x / sqrt(mean(x^2, last dim) + eps) * weight, over x's last dim (any leading dims).

    Numerics, shared by every row: x is read into fp32, the sum of squares is
    accumulated in fp32, and the normalised value (fp32) is multiplied by the
    weight in fp32 and rounded once to x's dtype; the normalised value is never
    rounded on its own. weight is [hidden], of x's dtype and device.
    """
    check_weight("rms_norm", x, weight)
    y = normalized(x.float(), weight, eps)
    if out is None:
        return y.to(x.dtype)
    check_out("rms_norm", out, x)
    return out.copy_(y)
