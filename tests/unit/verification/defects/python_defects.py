"""Plain-torch variants of op scale with a defect that a Triton kernel cannot show, and the fixed one.

Registered as ``external`` rows on CPU. Each is ``scale_<defect>(input, factor, out=None)``; the
docstring names the ``verify`` defect kind that catches it (rapid_llm.kernels.verification.defects.DEFECT_KINDS).
"""
from __future__ import annotations

import itertools

import torch

#: The vector width the skips_tail row pretends to work in (8 fp32 = 32 bytes).
VEC = 8


def scale_fixed(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """The fixed twin: out = input * factor, written into ``out`` when one is given (fp32 only)."""
    return torch.mul(input, factor, out=out) if out is not None else torch.mul(input, factor)


def scale_ignores_out(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT unwritten: returns a fresh, never written tensor and ignores ``out``."""
    return torch.empty_like(input)


def scale_skips_tail(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT unwritten: only the whole vectors are written, the last ``numel % 8`` elements never are."""
    if out is None:
        out = torch.empty_like(input)
    body = input.numel() - input.numel() % VEC
    torch.mul(input.reshape(-1)[:body], factor, out=out.view(-1)[:body])
    return out


def scale_nondeterministic(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Right within tolerance, but one element, a different one on each call, is one ulp off: two runs on
    one input differ (as an atomic-add reduction's order would). verify reports it (``deterministic``
    False); it is not a failure for a row that does not declare itself deterministic."""
    out = scale_fixed(input, factor, out)
    flat = out.view(-1)
    if flat.numel():
        i = next(_calls) % flat.numel()
        value = flat[i : i + 1]
        if torch.isfinite(value).all() and (value != 0).all():
            value.copy_(torch.nextafter(value, torch.full_like(value, float("inf"))))
    return out


_calls = itertools.count()


def scale_computes_in_bf16(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT precision_loss: the product is taken in bf16 and widened back, so an fp32 result carries bf16's
    8 bits of mantissa (a cheat that is faster where the contract says fp32)."""
    result = (input.to(torch.bfloat16) * factor).to(input.dtype)
    return out.copy_(result) if out is not None else result


def scale_flushes_subnormals(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """DEFECT flush_to_zero: subnormal inputs are taken as 0, as a kernel built with ``--use_fast_math`` (FTZ)
    does; their products, normal numbers, come back 0."""
    flushed = torch.where(input.abs() < torch.finfo(torch.float32).tiny, torch.zeros_like(input), input)
    return torch.mul(flushed, factor, out=out) if out is not None else torch.mul(flushed, factor)
