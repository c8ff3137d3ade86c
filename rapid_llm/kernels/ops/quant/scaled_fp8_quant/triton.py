"""Triton scaled_fp8_quant: groups (a token is one group) in registers, per tensor in two launches.

Groups and tokens: a program takes ROWS consecutive groups as a [ROWS, BLOCK] tile, so 1x128 groups fill
a program as well as 4096-wide tokens do; amax, the scale and the quantised values come from that one
read of x. Groups wider than MAX_ONE_PASS are read twice. Per tensor: a bounded number of programs each
write the largest |x| of their strided chunks, then every program of the quantising launch reduces those
few partial maxima itself (no atomics, no host sync: graph safe), and program 0 writes the scale.

Numerics are the floor's (scaled_fp8_quant_native): the scale max(amax / 448, 1/229376) with IEEE
division (div_rn: Triton's plain division of fp32 need not round correctly), NaN left out of amax, values
x * (1 / scale), clamped to +-448 with NaN kept, cast to fp8 e4m3 by round to nearest even.

Runs on CUDA only: Triton's CPU interpreter rounds float32 -> float8e4nv half up without carrying into the
exponent (7.75 becomes 4.0, not 8.0), so its results there say nothing about the compiled kernel.
"""
from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.toolchain import triton_support
from rapid_llm.kernels.ops.quant.scaled_fp8_quant.native import FP8_MAX, MIN_SCALE, check_args
from rapid_llm.kernels.registry.spec import Availability

#: The widest group kept whole in registers; a wider one is read twice, CHUNK elements at a time.
MAX_ONE_PASS = 16384
CHUNK = 4096
#: Elements per program in the grouped kernel (ROWS groups of BLOCK), and the per-tensor launches' tiles.
TILE = 4096
TENSOR_BLOCK = 4096
MAX_PARTIALS = 1024

INTERPRETER_REASON = ("Triton's CPU interpreter rounds float32 -> float8e4nv half up without carrying into the "
                      "exponent (7.75 -> 4.0): the row runs compiled, on CUDA only")


def available(device: Any = None) -> Availability:
    """triton_support's probe, except on CPU: the interpreter's fp8 cast is wrong (INTERPRETER_REASON)."""
    if (getattr(device, "type", device) or "cuda") == "cpu":
        return Availability(False, INTERPRETER_REASON)
    return triton_support.available(device)


@triton.jit
def _quantise(x, inv_scale):
    q = x * inv_scale
    q = tl.where(q != q, q, tl.minimum(tl.maximum(q, -448.0), 448.0))  # clamp, NaN kept
    return q.to(tl.float8e4nv)


@triton.jit
def _scale_of(amax, MIN: tl.constexpr):
    return tl.maximum(tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32)), MIN)


@triton.jit
def _groups_kernel(x_ptr, out_ptr, s_ptr, n_groups, size, MIN: tl.constexpr, ROWS: tl.constexpr,
                   BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, STATIC: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_groups
    cols = tl.arange(0, BLOCK)
    base = rows[:, None] * size
    if STATIC:
        scale = tl.load(s_ptr + rows, mask=row_ok, other=1.0)
    if ONE_PASS:
        mask = row_ok[:, None] & (cols[None, :] < size)
        x = tl.load(x_ptr + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if not STATIC:
            mag = tl.where(x == x, tl.abs(x), 0.0)
            scale = _scale_of(tl.max(mag, axis=1), MIN)
            tl.store(s_ptr + rows, scale, mask=row_ok)
        inv = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
        tl.store(out_ptr + base + cols[None, :], _quantise(x, inv[:, None]), mask=mask)
    else:
        if not STATIC:
            acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
            for start in range(0, size, BLOCK):
                mask = row_ok[:, None] & (start + cols[None, :] < size)
                x = tl.load(x_ptr + base + start + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                acc = tl.maximum(acc, tl.where(x == x, tl.abs(x), 0.0))
            scale = _scale_of(tl.max(acc, axis=1), MIN)
            tl.store(s_ptr + rows, scale, mask=row_ok)
        inv = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
        for start in range(0, size, BLOCK):
            mask = row_ok[:, None] & (start + cols[None, :] < size)
            x = tl.load(x_ptr + base + start + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + base + start + cols[None, :], _quantise(x, inv[:, None]), mask=mask)


@triton.jit
def _partial_amax_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, step):
        idx = start + offs
        x = tl.load(x_ptr + idx, mask=idx < n, other=0.0).to(tl.float32)
        acc = tl.maximum(acc, tl.where(x == x, tl.abs(x), 0.0))
    tl.store(partial_ptr + pid, tl.max(acc, axis=0))


@triton.jit
def _tensor_kernel(x_ptr, out_ptr, s_ptr, partial_ptr, n, n_partials, MIN: tl.constexpr, BLOCK: tl.constexpr,
                   PBLOCK: tl.constexpr, STATIC: tl.constexpr):
    pid = tl.program_id(0)
    if STATIC:
        scale = tl.load(s_ptr)
    else:
        p = tl.arange(0, PBLOCK)
        amax = tl.max(tl.load(partial_ptr + p, mask=p < n_partials, other=0.0), axis=0)
        scale = tl.maximum(tl.math.div_rn(amax, 448.0), MIN)
        if pid == 0:
            tl.store(s_ptr, scale)
    inv = tl.math.div_rn(1.0, scale)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, _quantise(x, inv), mask=mask)


def _check_dense(**tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"scaled_fp8_quant: contiguous tensors only, {name} is a strided view {list(t.shape)}")


def scaled_fp8_quant(output: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> None:
    """The floor's contract (scaled_fp8_quant_native) on CUDA tensors; this wrapper is the row's launcher and
    checks what a wrong pointer would turn into silent corruption (shapes, dtypes, devices, density)."""
    out = output
    n_groups, size = check_args("scaled_fp8_quant", out, x, scales, static)
    arguments.runs_on("scaled_fp8_quant", "Triton", ("cuda", "cpu"), x)  # meta tensors have no memory to read
    _check_dense(output=out, x=x, scales=scales)
    if n_groups == 1 and (size == 0 or size > MAX_ONE_PASS):  # one group: the per-tensor launches spread it
        _per_tensor(out, x, scales, static)
        return
    if x.numel() == 0:
        return
    one_pass = size <= MAX_ONE_PASS
    block = triton.next_power_of_2(size) if one_pass else CHUNK
    rows = max(1, min(TILE // block, triton.next_power_of_2(n_groups))) if one_pass else 1
    warps = max(1, min(16, rows * block // 512))
    _groups_kernel[(triton.cdiv(n_groups, rows),)](x, out, scales, n_groups, size, MIN=MIN_SCALE, ROWS=rows,
                                                  BLOCK=block, ONE_PASS=one_pass, STATIC=static, num_warps=warps)


def _per_tensor(out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> None:
    n = x.numel()
    programs = triton.cdiv(n, TENSOR_BLOCK)
    n_partials = 0 if static else min(programs, MAX_PARTIALS)
    partials = torch.empty(max(n_partials, 1), dtype=torch.float32, device=x.device)
    if n_partials:
        _partial_amax_kernel[(n_partials,)](x, partials, n, BLOCK=TENSOR_BLOCK, num_warps=8)
    if n == 0 and static:
        return
    _tensor_kernel[(max(programs, 1),)](x, out, scales, partials, n, n_partials, MIN=MIN_SCALE, BLOCK=TENSOR_BLOCK,
                                        PBLOCK=triton.next_power_of_2(max(n_partials, 1)), STATIC=static,
                                        num_warps=8)
