"""The floor for scale: plain torch, runs on every device, dtype and layout."""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.platform import describe

_HALF = (torch.float16, torch.bfloat16)
#: What the op declares (the floor's row); the floor refuses any other rather than compute in it.
DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def check(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> None:
    """scale's argument checks, every path's (rapid_llm.kernels.ops.arguments): out may be input itself."""
    a.tensor("scale", "input", input)
    a.dtype_in("scale", "input", input, DTYPES)
    a.real("scale", "factor", factor)
    if a.optional_tensor("scale", "out", out) is not None:
        if out.shape != input.shape or out.dtype != input.dtype or out.device != input.device:
            raise ValueError(f"scale: shapes/dtypes differ: {describe(out)} vs {describe(input)}")  # rl::check_same's
        a.no_overlap("scale", {"out": out}, {"input": input}, allow_same=(("out", "input"),))


def scale(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = input * factor, computed in fp32 for half types and rounded once, like the other rows.

    On CUDA torch.mul already does that (fp32 opmath, fp32 scalar), and without
    ``out`` this is exactly ``torch.mul``: the floor costs a caller nothing. CPU
    kernels round the scalar to the half type first (0.7 becomes 0.69921875 in
    bf16), so on CPU half types go through fp32 explicitly.
    """
    check(input, factor, out)
    if out is None:
        if input.is_cpu and input.dtype in _HALF:  # is_cpu: no device object built per call
            return input.float().mul_(factor).to(input.dtype)
        return torch.mul(input, factor)
    if input.device.type == "cpu" and input.dtype in _HALF:
        return out.copy_(input.float().mul_(factor))
    return torch.mul(input, factor, out=out)


def _specialize(input: torch.Tensor, has_out: bool):
    """What dispatch may call instead for calls like this one: ``torch.mul`` itself where it computes exactly
    what ``scale`` does (no ``out=``, not a half type on CPU), so the floor costs a caller nothing."""
    if has_out or (input.is_cpu and input.dtype in _HALF):
        return None
    return torch.mul


scale.specialize = _specialize
scale.check = check
