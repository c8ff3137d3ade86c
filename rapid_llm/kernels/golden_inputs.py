"""Reference inputs and float64 oracles for the shipped ops' golden verification.

Each op gets sizes that catch the usual kernel bugs (a single element, one
past a block multiple, a large size), shapes and values that catch the rest
(an unaligned start, 2-D input, zeros, infinities, NaN, the dtype's extremes,
subnormals), and the exact result in float64. This is the package's own
oracle; the test suite keeps an independent one.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.golden import register_reference

#: Not a power of two: a power of two only shifts the exponent, so rounding bugs would hide.
SCALE_FACTOR = 1.7


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * 4).to(dtype=dtype, device=device)


def _specials(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    info = torch.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), info.max, -info.max,
              info.tiny, -info.tiny, info.tiny * info.eps, info.eps, 1.0 + info.eps, 65504.0]
    return torch.tensor(values, dtype=torch.float64).to(dtype=dtype, device=device)


def scale_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                 gen: torch.Generator) -> tuple:
    return (_randn(shape, dtype, device, gen), SCALE_FACTOR)


def scale_edges(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    base = _randn((4097 + 1,), dtype, device, gen)
    return [
        ("2-D (3, 4097)", (_randn((3, 4097), dtype, device, gen), SCALE_FACTOR)),
        ("unaligned start (storage offset 1)", (base[1:], SCALE_FACTOR)),
        ("special values", (_specials(dtype, device), SCALE_FACTOR)),
        ("negative factor -0.3", (_randn((4097,), dtype, device, gen), -0.3)),
        ("factor 0", (_randn((257,), dtype, device, gen), 0.0)),
    ]


def scale_oracle(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x.to(torch.float64) * float(factor)


def scale_call(fn, x: torch.Tensor, factor: float) -> torch.Tensor:
    """Call through ``out=`` pre-filled with NaN: an element the row never writes cannot pass."""
    out = torch.full_like(x, float("nan"))
    fn(x, factor, out=out)
    return out


register_reference("scale", scale_inputs, scale_oracle, call=scale_call, edge_cases=scale_edges)
