"""Triton scale: out = input * factor, the default fast path.

Runs on CUDA tensors, and on CPU tensors under ``TRITON_INTERPRET=1`` (how CI
checks this row for real without a GPU).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.elementwise.scale.native import check

BLOCK = 4096


@triton.jit
def _scale_kernel(out_ptr, in_ptr, factor, n, BLOCK: tl.constexpr):
    # int64 offsets: numel-derived indexing must not overflow past 2^31 elements.
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(in_ptr + offsets, mask=mask)
    # fp32 math: a launch from Python passes factor as fp32, Inductor (torch.compile) as fp64.
    y = x.to(tl.float32) * tl.cast(factor, tl.float32)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def scale(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = input * factor; an empty input returns at once without a launch.

    A Triton row has no C++ launcher, so this wrapper is its launcher: it
    checks what a wrong pointer would otherwise turn into silent corruption.
    """
    check(input, factor, out)
    arguments.runs_on("scale", "Triton", ("cuda", "cpu"), input)
    if input.dtype not in _DTYPES:  # else Triton fails to compile the kernel, in a screenful
        raise ValueError(f"scale: input must be bf16, fp16 or fp32, got {input.dtype}")
    if not input.is_contiguous():
        raise ValueError("scale: contiguous tensors only")
    if out is None:
        out = torch.empty_like(input)
    elif not out.is_contiguous():
        raise ValueError("scale: contiguous tensors only")
    n = input.numel()
    if n:
        _scale_kernel[(triton.cdiv(n, BLOCK),)](out, input, float(factor), n, BLOCK=BLOCK)
    return out
