"""Gluon rms_norm for Hopper (sm_90): one CTA per token row, the layout written out instead of inferred.

Gluon (``triton.experimental.gluon``) is Triton with the layouts in the
programmer's hands. Here one blocked layout covers the hidden dim: each thread
owns ``VEC`` consecutive elements (16 bytes: 8 bf16/fp16, 4 fp32), a warp 32
such runs side by side, so every load and store is a 16-byte access and a warp
touches 512 contiguous bytes. The sum of squares is accumulated in fp32 in the
same layout and reduced across the CTA; the numerics are native/rms_norm's (fp32
sum, ``1 / sqrt_rn(mean + eps)``, one rounding of ``x * inv_rms * w``).

A row up to ``MAX_ONE_PASS`` wide is held in registers (read once); a wider one
is read twice in ``CHUNK``-element pieces. The tail of a hidden size that is no
multiple of the block is masked. Written for the Gluon of Triton 3.6 and
compiling unchanged with later releases (rapid_llm.kernels.toolchain.gluon_support
names the range). Gluon has no CPU interpreter, so the row runs on CUDA only.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from rapid_llm.kernels.ops.norm.rms_norm.native import check
from rapid_llm.kernels.ops.norm.rms_norm.triton import check_contiguous, check_dtype, check_rows
from rapid_llm.kernels.ops import arguments

#: The widest row kept whole in registers (one pass); a wider one is read twice, in CHUNK-element pieces.
MAX_ONE_PASS = 16384
CHUNK = 4096
#: Bytes per thread per access: one 16-byte (128-bit) load or store.
ACCESS_BYTES = 16


@gluon.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, x_stride, out_stride, hidden, eps,
                     BLOCK: gl.constexpr, VEC: gl.constexpr, WARPS: gl.constexpr, ONE_PASS: gl.constexpr):
    # VEC consecutive elements a thread (16 bytes), 32 threads a warp, WARPS warps: one run over the hidden dim.
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[VEC], threads_per_warp=[32], warps_per_cta=[WARPS],
                                            order=[0])
    row = gl.program_id(0).to(gl.int64)  # int64: tokens * row stride can pass 2^31 elements
    x_ptr += row * x_stride
    out_ptr += row * out_stride
    eps = gl.cast(eps, gl.float32)  # Inductor passes eps as fp64; the math stays fp32
    cols = gl.arange(0, BLOCK, layout=layout)
    if ONE_PASS:
        mask = cols < hidden
        x = gl.load(x_ptr + cols, mask=mask, other=0.0).to(gl.float32)
        inv_rms = 1.0 / gl.sqrt_rn(gl.sum(x * x, axis=0) / hidden + eps)
        w = gl.load(w_ptr + cols, mask=mask, other=0.0).to(gl.float32)
        gl.store(out_ptr + cols, (x * inv_rms * w).to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)
    else:
        acc = gl.zeros([BLOCK], gl.float32, layout)
        for start in range(0, hidden, BLOCK):
            mask = start + cols < hidden
            x = gl.load(x_ptr + start + cols, mask=mask, other=0.0).to(gl.float32)
            acc += x * x
        inv_rms = 1.0 / gl.sqrt_rn(gl.sum(acc, axis=0) / hidden + eps)
        for start in range(0, hidden, BLOCK):
            mask = start + cols < hidden
            x = gl.load(x_ptr + start + cols, mask=mask, other=0.0).to(gl.float32)
            w = gl.load(w_ptr + start + cols, mask=mask, other=0.0).to(gl.float32)
            gl.store(out_ptr + start + cols, (x * inv_rms * w).to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


def launch_shape(hidden: int, element_size: int) -> dict[str, int | bool]:
    """The kernel's constexprs and warps for a row ``hidden`` wide: 16-byte accesses, about 16 elements a thread
    (8 warps for a 4096-wide bf16 row), one pass up to MAX_ONE_PASS. Tests compile exactly these shapes."""
    vec = ACCESS_BYTES // element_size
    one_pass = hidden <= MAX_ONE_PASS
    block = max(triton.next_power_of_2(hidden) if one_pass else CHUNK, 32 * vec)
    warps = max(1, min(16, block // 512))
    return {"BLOCK": block, "VEC": vec, "WARPS": warps, "ONE_PASS": one_pass}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x / sqrt(mean(x^2) + eps) * weight over the last dim; the numerics of native/rms_norm.

    The row's launcher: the same checks as the Triton row (shapes, dtypes, devices; x and out may each have a
    row stride, weight is dense), since a wrong pointer would otherwise corrupt memory silently.
    """
    check(x, weight, eps, out)
    arguments.runs_on("rms_norm", "Gluon", ("cuda",), x)
    check_dtype("rms_norm", x)
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    check_contiguous("rms_norm", weight=weight)
    strides = check_rows("rms_norm", x=x, out=out)
    hidden = x.shape[-1]
    if x.numel() == 0:
        return out
    shape = launch_shape(hidden, x.element_size())
    _rms_norm_kernel[(x.numel() // hidden,)](x, weight, out, strides["x"], strides["out"], hidden, float(eps),
                                             num_warps=shape["WARPS"], **shape)
    return out
