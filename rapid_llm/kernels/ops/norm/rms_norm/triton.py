"""Triton rms_norm: one program per token row, the fp32 row held in registers when it fits.

The kernel also serves fused_add_rms_norm (``ADD_RESIDUAL``): both ops are
one row-wise normalisation, one of them with an add in front. Runs on CUDA
tensors, and on CPU tensors under ``TRITON_INTERPRET=1``.

Each tensor's rows are addressed through its own row stride (spec.row_stride),
so a slice ``x[:, :H]`` of a [T, 2H] buffer (vLLM's and FlashInfer's strided
case) runs without a copy; the row declares layouts ("contiguous", "rows").
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.norm.rms_norm.native import check
from rapid_llm.kernels.registry.spec import row_stride

#: The widest row kept whole in registers (one pass); a wider one is read twice, in CHUNK-element pieces.
MAX_ONE_PASS = 16384
CHUNK = 4096


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, x_stride, res_stride, out_stride, hidden, eps,
                     BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, ADD_RESIDUAL: tl.constexpr):
    # int64 row offsets: tokens * row stride can pass 2^31 elements. Each tensor has its own row stride.
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * x_stride
    res_ptr += row * res_stride
    out_ptr += row * out_stride
    # fp32 math: a launch from Python passes eps as fp32, Inductor (torch.compile) as fp64, which
    # tl.sqrt_rn does not take and which would move the sum into fp64.
    eps = tl.cast(eps, tl.float32)
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = cols < hidden
        total = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if ADD_RESIDUAL:
            total += tl.load(res_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(res_ptr + cols, total.to(res_ptr.dtype.element_ty, fp_downcast_rounding="rtne"),
                     mask=mask)
        inv_rms = 1.0 / tl.sqrt_rn(tl.sum(total * total, axis=0) / hidden + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = total * inv_rms * w
        tl.store(out_ptr + cols, y.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)
    else:
        # Pass 1: the sum of squares. Nothing is written yet, so pass 2 can form the same fp32 sum again
        # from the original x and residual (the contract normalises that sum, not the rounded residual).
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, hidden, BLOCK):
            mask = start + cols < hidden
            total = tl.load(x_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            if ADD_RESIDUAL:
                total += tl.load(res_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc += total * total
        inv_rms = 1.0 / tl.sqrt_rn(tl.sum(acc, axis=0) / hidden + eps)
        for start in range(0, hidden, BLOCK):
            mask = start + cols < hidden
            total = tl.load(x_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            if ADD_RESIDUAL:
                total += tl.load(res_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
                tl.store(res_ptr + start + cols,
                         total.to(res_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            y = total * inv_rms * w
            tl.store(out_ptr + start + cols, y.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"),
                     mask=mask)


#: What the kernels compute in (fp32 math, stored back in the input's dtype); the rows declare the same.
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_dtype(op: str, x: torch.Tensor) -> None:
    """ValueError naming the op for a dtype the kernels do not take (else Triton fails to compile them)."""
    if x.dtype not in DTYPES:
        raise ValueError(f"{op}: x must be bf16, fp16 or fp32, got {x.dtype}")


def check_rows(op: str, **tensors: torch.Tensor) -> dict[str, int]:
    """Each tensor's row stride (spec.row_stride); ValueError naming the op for a view without one (a
    transposed or a step-sliced tensor), which would otherwise be read at the wrong addresses."""
    strides = {}
    for name, t in tensors.items():
        stride = row_stride(t)
        if stride is None:
            raise ValueError(f"{op}: {name} must have a contiguous last dim and one row stride, got a strided view "
                             f"{list(t.shape)} with strides {list(t.stride())}")
        strides[name] = stride
    return strides


def check_contiguous(op: str, **tensors: torch.Tensor) -> None:
    """For what the kernel reads as one flat run (the weight): a dense tensor, else ValueError naming the op."""
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"{op}: contiguous tensors only, {name} is a strided view {list(t.shape)}")


def launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, out: torch.Tensor,
           eps: float, strides: dict[str, int], num_warps: int | None = None) -> None:
    """One program per row of x viewed as [tokens, hidden], each tensor at its row stride (``strides``, from
    check_rows: x, out and residual where given); nothing is launched for an empty x. ``num_warps`` None: the
    rule below."""
    hidden = x.shape[-1]
    if x.numel() == 0:
        return
    one_pass = hidden <= MAX_ONE_PASS
    block = triton.next_power_of_2(hidden) if one_pass else CHUNK
    # About 16 elements per thread: 8 warps for a 4096-wide row, up to 16 for the widest.
    warps = max(1, min(16, block // 512)) if num_warps is None else num_warps
    _rms_norm_kernel[(x.numel() // hidden,)](
        x, x if residual is None else residual, weight, out, strides["x"], strides.get("residual", 0),
        strides["out"], hidden, float(eps),
        BLOCK=block, ONE_PASS=one_pass, ADD_RESIDUAL=residual is not None, num_warps=warps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None, *,
             num_warps: int | None = None) -> torch.Tensor:
    """out = x / sqrt(mean(x^2) + eps) * weight over the last dim; the numerics of native/rms_norm.

    ``num_warps`` is the row's declared search space (norm_rows: ``tune_space``): None keeps the rule in
    :func:`launch`; ``tune("triton/rms_norm")`` pins the fastest for a GPU kind.

    This wrapper is the row's launcher: it checks what a wrong pointer would
    otherwise turn into silent corruption (shapes, dtypes, devices, layout: x and out may each have a
    row stride, weight is dense).
    """
    check(x, weight, eps, out)
    arguments.runs_on("rms_norm", "Triton", ("cuda", "cpu"), x)
    check_dtype("rms_norm", x)
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    check_contiguous("rms_norm", weight=weight)
    launch(x, None, weight, out, eps, check_rows("rms_norm", x=x, out=out), num_warps)
    return out
