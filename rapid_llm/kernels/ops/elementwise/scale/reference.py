"""scale's float64 reference (inputs, oracle, edge cases) and its benchmark case.

The sizes catch the usual kernel bugs (a single element, one past a block
multiple, a large size); the edge cases catch the rest (an unaligned start,
2-D input, zeros, infinities, NaN, the dtype's extremes, subnormals, and subnormal inputs
whose products are normal: a flush to zero shows).
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.verification.defects import output_like
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference

#: Not a power of two: a power of two only shifts the exponent, so rounding bugs would hide.
FACTOR = 1.7


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * 4).to(dtype=dtype, device=device)


def _specials(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    info = torch.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), info.max, -info.max,
              info.tiny, -info.tiny, info.tiny * info.eps, info.eps, 1.0 + info.eps, 65504.0]
    return torch.tensor(values, dtype=torch.float64).to(dtype=dtype, device=device)


def _subnormals(n: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """``n`` subnormal values of ``dtype`` (both signs): scaled by SUBNORMAL_FACTOR they are normal numbers, so
    a row that flushes subnormals to zero (FTZ) gets them wrong instead of hiding under the rule's ``tiny``."""
    info = torch.finfo(dtype)
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    return (sign * info.tiny * (info.eps + (1 - info.eps) * u)).to(dtype=dtype, device=device)


#: A power of two, so the exact products of subnormal inputs are exact normal numbers in every dtype.
SUBNORMAL_FACTOR = 2.0 ** 24


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    return (_randn(shape, dtype, device, gen), FACTOR)


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    base = _randn((4097 + 1,), dtype, device, gen)
    return [
        ("2-D (3, 4097)", (_randn((3, 4097), dtype, device, gen), FACTOR)),
        ("unaligned start (storage offset 1)", (base[1:], FACTOR)),
        ("special values", (_specials(dtype, device), FACTOR)),
        ("negative factor -0.3", (_randn((4097,), dtype, device, gen), -0.3)),
        ("factor 0", (_randn((257,), dtype, device, gen), 0.0)),
    ] + ([] if dtype == torch.bfloat16 else [  # fp32's case shows a flush (bf16 subnormals widen to fp32 ones),
        ("subnormal inputs x 2^24", (_subnormals(1031, dtype, device, gen), SUBNORMAL_FACTOR)),  # and Triton's CPU
    ])  # interpreter widens bf16 subnormals wrongly


def oracle(x: torch.Tensor, factor: float) -> torch.Tensor:
    """out = x * factor, exactly (in float64)."""
    return x.to(torch.float64) * float(factor)


def call(fn, x: torch.Tensor, factor: float) -> torch.Tensor:
    """Call through a poisoned ``out=`` (rapid_llm.kernels.verification.defects.output_like): an unwritten element shows."""
    out = output_like(x)
    fn(x, factor, out=out)
    return out


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    x = torch.empty(numel, dtype=dtype, device=device).uniform_(-4, 4)
    out = torch.empty_like(x)
    return CaseArgs((x, FACTOR), {"out": out}, bytes_moved=2 * numel * x.element_size())


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases)
