"""Triton variants of op scale (out = input * factor) with one defect each, and the fixed kernel.

Each wrapper is ``scale_<defect>(input, factor, out=None)``, usable as a Triton row of scale on
CUDA and on CPU under ``TRITON_INTERPRET=1``; the comment on each names its defect and the
``verify`` defect kind that catches it (rapid_llm.kernels.verification.defects.DEFECT_KINDS).
"""
from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _fixed_kernel(out_ptr, in_ptr, factor, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(in_ptr + offsets, mask=mask)
    y = x.to(tl.float32) * factor
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


@triton.jit
def _mutates_input_kernel(out_ptr, in_ptr, factor, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(in_ptr + offsets, mask=mask)
    y = (x.to(tl.float32) * factor).to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(out_ptr + offsets, y, mask=mask)
    tl.store(in_ptr + offsets, y, mask=mask)  # DEFECT: a scratch write into the caller's input


@triton.jit
def _constant_output_kernel(out_ptr, in_ptr, factor, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    y = tl.full((BLOCK,), 1.0, tl.float32) * factor  # DEFECT: never loads the input
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


@triton.jit
def _out_of_bounds_kernel(out_ptr, in_ptr, factor, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(in_ptr + offsets, mask=offsets < n, other=0.0)
    y = x.to(tl.float32) * factor
    # DEFECT: the store's mask is off by one (<= n): out[n] = 0 is written past the end of out
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=offsets <= n)


@triton.jit
def _reads_past_end_kernel(out_ptr, in_ptr, factor, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # DEFECT: the last element is read one place too far on (in[n], past the end of the input)
    source = tl.where(offsets == n - 1, offsets + 1, offsets)
    x = tl.load(in_ptr + source, mask=mask)
    y = x.to(tl.float32) * factor
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


def _checked_out(input: torch.Tensor, out: torch.Tensor | None, name: str) -> torch.Tensor:
    """The wrapper's checks, as in the shipped Triton row (the defects are in the kernels, not here)."""
    if not input.is_contiguous():
        raise ValueError(f"{name}: contiguous tensors only")
    if out is None:
        return torch.empty_like(input)
    if out.shape != input.shape or out.dtype != input.dtype or out.device != input.device:
        raise ValueError(f"{name}: out must match input shape/dtype/device, got {tuple(out.shape)} {out.dtype} "
                         f"{out.device} vs {tuple(input.shape)} {input.dtype} {input.device}")
    if not out.is_contiguous():
        raise ValueError(f"{name}: contiguous tensors only")
    return out


def _launch(kernel: Callable, input: torch.Tensor, factor: float, out: torch.Tensor | None, name: str) -> torch.Tensor:
    out = _checked_out(input, out, name)
    n = input.numel()
    if n:
        kernel[(triton.cdiv(n, BLOCK),)](out, input, float(factor), n, BLOCK=BLOCK)
    return out


def scale_fixed(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """The fixed twin of every defect below: out = input * factor, masked, input untouched."""
    return _launch(_fixed_kernel, input, factor, out, "scale_fixed")


def scale_mutates_input(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT mutated_input: out is right, and input is overwritten with it too."""
    return _launch(_mutates_input_kernel, input, factor, out, "scale_mutates_input")


def scale_constant_output(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT input_independent: every element is factor, whatever the input (and wrong)."""
    return _launch(_constant_output_kernel, input, factor, out, "scale_constant_output")


def scale_out_of_bounds(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT guard_band: every element right, and one more written just past the end of out."""
    return _launch(_out_of_bounds_kernel, input, factor, out, "scale_out_of_bounds")


def scale_reads_past_end(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT out_of_bounds_read: the last element is computed from the one past the end of the input."""
    return _launch(_reads_past_end_kernel, input, factor, out, "scale_reads_past_end")


def scale_writes_nothing(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT unwritten: the early return for an empty input tests ``n >= 0``, so nothing is launched."""
    out = _checked_out(input, out, "scale_writes_nothing")
    n = input.numel()
    if n >= 0:  # DEFECT: meant `n == 0`
        return out
    _fixed_kernel[(triton.cdiv(n, BLOCK),)](out, input, float(factor), n, BLOCK=BLOCK)
    return out
