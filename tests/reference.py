"""The float64 oracles rows are checked against, and how close a rounded result must be.

Rows are compared with an oracle, never with each other: two rows can share a
bug. Each op has one oracle, the one its declaration holds (its group's
reference module); :func:`oracle` returns it, so tests, notebooks and
``verify`` check against the same function. ``tolerance`` says how far a
correctly rounded result in a given dtype may sit from it.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from rapid_llm.kernels.registry import spec


def oracle(op: str) -> Callable[..., Any]:
    """The float64 oracle op ``op`` declared."""
    return spec.get_decl(op).reference.oracle


def scale_ref(x: torch.Tensor, factor: float) -> torch.Tensor:
    """out = x * factor, exactly (in float64): scale's declared oracle."""
    return oracle("scale")(x, factor)


def tolerance(dtype: torch.dtype, ref: torch.Tensor) -> torch.Tensor:
    """Elementwise bound for a result rounded once (or twice, via fp32) into ``dtype``.

    One rounding into ``dtype`` is at most half an ulp: eps/2 * |ref|. A row
    that computes in fp32 and then rounds into a half type can be off by one
    more fp32 rounding, far below the half-type ulp; ``eps * |ref|`` covers both
    with margin, plus the smallest normal for values near zero.
    """
    info = torch.finfo(dtype)
    return ref.abs() * info.eps + info.tiny


def assert_close_to_ref(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Fail with the worst element when ``out`` is further from ``ref`` than one rounding allows."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if out.numel() == 0:
        return
    diff = (out.to(torch.float64) - ref.to(ref.device)).abs()
    bound = tolerance(out.dtype, ref)
    bad = diff > bound
    if bool(bad.any()):
        i = int(torch.argmax((diff - bound).flatten()))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {out.numel()} elements off; worst at flat index {i}: "
            f"got {out.flatten()[i].item()!r}, expected {ref.flatten()[i].item()!r}"
        )
