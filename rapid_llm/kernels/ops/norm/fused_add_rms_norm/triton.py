"""Triton fused_add_rms_norm: rms_norm's kernel with the residual add in front (rms_norm_triton)."""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.norm.fused_add_rms_norm.native import check
from rapid_llm.kernels.ops.norm.rms_norm.triton import check_contiguous, check_dtype, check_rows, launch


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: residual += x (fp32 sum, rounded once), x = rms_norm of that fp32 sum; returns None.

    The numerics of native/fused_add_rms_norm. This wrapper is the row's launcher and checks shapes,
    dtypes, devices and layout before any pointer reaches the kernel.
    """
    check(x, residual, weight, eps)
    arguments.runs_on("fused_add_rms_norm", "Triton", ("cuda", "cpu"), x)
    check_dtype("fused_add_rms_norm", x)
    check_contiguous("fused_add_rms_norm", weight=weight)
    strides = check_rows("fused_add_rms_norm", x=x, residual=residual)  # each its own row stride, in place
    launch(x, residual, weight, x, eps, {**strides, "out": strides["x"]})
