"""fused_add_rms_norm's float64 reference and its benchmark case.

The op works in place, so ``call`` runs a row on copies of x and residual
(keeping their alignment: an unaligned case stays unaligned) and returns both
results, residual then x, flattened into one tensor; the oracle returns the
same concatenation computed in float64 from the inputs. Inputs and edge cases
are rms_norm's (rms_norm_reference) with a residual beside x; the row-strided
ones add a residual with a row stride of its own, both written in place.

The oracle normalises the exact sum, like a row that normalises its fp32 sum;
a row that normalised the rounded residual instead would sit up to one more
half-type rounding away. The tolerance (rms_norm's ``ulps = 4``) admits both:
the contract between them is pinned by tests/ops/test_rms_norm.py.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.verification.defects import copy_for_row
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference
from rapid_llm.kernels.ops.norm.rms_norm import reference as rms

EPS = rms.EPS


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    x, weight, eps = rms.make_inputs(shape, dtype, device, gen)
    return (x, rms.randn(tuple(x.shape), dtype, device, gen, 4.0), weight, eps)


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    cases = []
    for label, (x, weight, eps) in rms.edge_cases(dtype, device, gen):
        residual = rms.randn(tuple(x.shape), dtype, device, gen, 2.0)
        cases.append((label, (x, residual if x.data_ptr() % 16 == 0 else rms.unaligned(residual), weight, eps)))
    x = rms.randn((4, 4096), dtype, device, gen)
    cases.append(("[4, 4096] residual = -x (the sum cancels to zero)", (x, -x, rms.make_weight(4096, dtype, device, gen),
                                                                         EPS)))
    # The residual's own row stride: 16-byte aligned for x's aligned and unaligned strides, then off the grid
    # under an aligned x (each operand decides the vector path).
    widths = (6144, 1032, 525)
    for (label, (x, weight, eps)), width in zip(rms.strided_cases(dtype, device, gen), widths, strict=True):
        residual = rms.row_strided(rms.randn(tuple(x.shape), dtype, device, gen, 2.0), width, gen)
        cases.append((f"{label}, residual row stride {width}", (x, residual, weight, eps)))
    big = rms.randn((4, 4096), dtype, device, gen, 300.0)
    cases.append(("[4, 4096] residual 300x larger than x (the sum rounds)",
                  (rms.randn((4, 4096), dtype, device, gen), big, rms.make_weight(4096, dtype, device, gen), EPS)))
    return cases


def oracle(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """cat(residual + x, rms_norm(residual + x)) flattened, in float64."""
    total = x.to(torch.float64) + residual.to(torch.float64)
    return torch.cat([total.flatten(), rms.oracle(total, weight, eps).flatten()])


def call(fn, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Run the in-place row on copies; return cat(residual, x) flattened, as the oracle does."""
    x, residual = copy_for_row(x, "x"), copy_for_row(residual, "residual")
    result = fn(x, residual, weight, eps)
    if result is not None:
        raise TypeError(f"fused_add_rms_norm works in place and returns None, got {type(result).__name__}")
    return torch.cat([residual.flatten(), x.flatten()])


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """T = max(1, numel // 4096) tokens of hidden 4096; an ideal kernel reads x, residual and weight once and
    writes x and residual. Repeated calls keep the values bounded: x is normalised each time, and residual
    grows by it."""
    tokens = max(1, numel // rms.BENCH_HIDDEN)
    x, weight = rms.bench_inputs(tokens, dtype, device)
    residual = torch.empty_like(x).normal_()
    esize = x.element_size()
    return CaseArgs((x, residual, weight, EPS), {},
                    bytes_moved=4 * tokens * rms.BENCH_HIDDEN * esize + rms.BENCH_HIDDEN * esize)


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases, ulps=rms.ULPS)
