"""The floor for silu_and_mul: plain torch, runs on every device, dtype and layout."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.platform import describe, shape_str

_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_args(x: torch.Tensor, out: torch.Tensor | None) -> int:
    """I (half of x's last dim); ValueError naming the op for what every row refuses, in the CUDA launcher's
    words (TypeError for a non-tensor)."""
    a.tensor("silu_and_mul", "x", x)
    a.optional_tensor("silu_and_mul", "out", out)
    two_i = x.shape[-1] if x.dim() else 1
    if two_i % 2:
        raise ValueError(f"silu_and_mul: the input's last dim must be even ([..., 2I]), got {shape_str(x)}")
    if x.dtype not in _DTYPES:
        raise ValueError(f"silu_and_mul: x must be bf16, fp16 or fp32, got {x.dtype}")
    inner = two_i // 2
    if out is not None:
        if tuple(out.shape) != (*x.shape[:-1], inner):
            raise ValueError(f"silu_and_mul: out must be x's shape with the last dim halved, got out {describe(out)} "
                             f"for x {describe(x)}")
        if out.dtype != x.dtype or out.device != x.device:
            raise ValueError(f"silu_and_mul: out and x must have one dtype, got out {describe(out)} and x "
                             f"{describe(x)}")
        a.no_overlap("silu_and_mul", {"out": out}, {"x": x})
    return inner


def check(x: torch.Tensor, out: torch.Tensor | None = None) -> None:
    """silu_and_mul's argument checks, every path's (rapid_llm.kernels.ops.arguments)."""
    check_args(x, out)


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = silu(x[..., :I]) * x[..., I:] for x of shape [..., 2I]; out is [..., I].

    Numerics (every row keeps them): both halves are upcast to fp32,
    silu(a) = a / (1 + exp(-a)) is computed in fp32 (torch's silu on CUDA is
    exactly that expression, with expf and IEEE division), multiplied by b in
    fp32, and the product is rounded once to x's dtype. An infinite gate follows
    IEEE arithmetic: silu(+inf) = +inf, silu(-inf) = -inf / inf = NaN.
    The last dim must be even; an odd one raises ValueError.
    """
    inner = check_args(x, out)
    product = F.silu(x[..., :inner].float()).mul_(x[..., inner:])
    if out is None:
        return product.to(x.dtype)
    return out.copy_(product)


silu_and_mul.check = check
