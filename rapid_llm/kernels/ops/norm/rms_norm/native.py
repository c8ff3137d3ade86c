"""The floor for rms_norm: plain torch, runs on every device, dtype and layout."""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.platform import describe, must_match


def check_weight(op: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    """x is a bf16/fp16/fp32 tensor; weight is [hidden] of x's dtype and device: what every row of both norm
    ops requires."""
    a.tensor(op, "x", x)
    a.tensor(op, "weight", weight)
    a.dtype_in(op, "x", x, a.FLOAT_DTYPES)
    if x.dim() < 1:
        raise ValueError(f"{op}: x must have a hidden dimension, got a 0-d tensor")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"{op}: weight must be [{x.shape[-1]}] (x's last dim), got {list(weight.shape)}")
    if weight.dtype != x.dtype:
        raise ValueError(f"{op}: weight must have x's dtype, got {describe(weight)} vs {describe(x)}")
    if weight.device != x.device:
        raise ValueError(f"{op}: weight must be on x's device, got {describe(weight)} vs {describe(x)}")


def check_eps(op: str, eps: float) -> None:
    a.real(op, "eps", eps, at_least=0.0)


def check_out(op: str, out: torch.Tensor, x: torch.Tensor) -> None:
    """out has x's shape, dtype and device (any row stride: the rows that take one say so)."""
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(must_match(op, "out", out, "x", x))


def normalized(total: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 ``total / sqrt(mean(total^2) + eps) * weight``, the product formed in fp32 (not yet rounded)."""
    inv_rms = torch.rsqrt(total.square().mean(-1, keepdim=True) + eps)
    return total * inv_rms * weight.float()


def check(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> None:
    """rms_norm's argument checks, every path's (rapid_llm.kernels.ops.arguments)."""
    check_weight("rms_norm", x, weight)
    check_eps("rms_norm", eps)
    if a.optional_tensor("rms_norm", "out", out) is not None:
        check_out("rms_norm", out, x)
        a.no_overlap("rms_norm", {"out": out}, {"x": x, "weight": weight})


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x / sqrt(mean(x^2, last dim) + eps) * weight, over x's last dim (any leading dims).

    Numerics, shared by every row: x is read into fp32, the sum of squares is
    accumulated in fp32, and the normalised value (fp32) is multiplied by the
    weight in fp32 and rounded once to x's dtype; the normalised value is never
    rounded on its own. weight is [hidden], of x's dtype and device.
    """
    check(x, weight, eps, out)
    y = normalized(x.float(), weight, eps)
    if out is None:
        return y.to(x.dtype)
    return out.copy_(y)


rms_norm.check = check
