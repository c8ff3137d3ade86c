"""Rows that skip work where they hope no check looks: lazy results, a freed block, a hard-coded shape, skipped
calls, and answers that fit one input law.

Each is a plain-torch row (CPU, and CUDA tensors too) of op scale, ``scale_<cheat>(input, factor, out=None)``,
or of op rms_norm, ``rms_norm_<cheat>(x, weight, eps, out=None)``; the docstring names the cheat and what
catches it.
"""
from __future__ import annotations

import random
import time
from typing import Any

import torch


class _LazyProduct(torch.Tensor):
    """``input * factor`` computed only when something reads it: the first torch function on it does the work."""

    @staticmethod
    def make(input: torch.Tensor, factor: float) -> "_LazyProduct":
        lazy = torch.Tensor._make_subclass(_LazyProduct, torch.empty_like(input))
        lazy._pending = (input.clone(), factor)  # the clone is cheap next to what a real op does; it stands for it
        return lazy

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        for a in args:
            pending = getattr(a, "_pending", None) if isinstance(a, _LazyProduct) else None
            if pending is not None:
                a._pending = None
                with torch._C.DisableTorchFunctionSubclass():
                    torch.mul(pending[0], pending[1], out=a)
        return super().__torch_function__(func, types, args, kwargs or {})


def scale_lazy_subclass(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Lazy result: returns a tensor subclass that computes the product when first read, so the timed call only
    allocates and the work lands in the checker. Caught by bench: ``lazy_result``."""
    return _LazyProduct.make(input, factor)


class _AlwaysEqual(torch.Tensor):
    """A result whose comparisons all say "equal" (``==``, ``isclose``, ``allclose``, ``equal``)."""

    _SAYS_EQUAL = {torch.Tensor.__eq__, torch.eq, torch.isclose, torch.allclose, torch.equal}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in cls._SAYS_EQUAL:
            like = next(a for a in args if isinstance(a, torch.Tensor))
            if func in (torch.allclose, torch.equal):
                return True
            with torch._C.DisableTorchFunctionSubclass():
                return torch.ones(like.shape, dtype=torch.bool, device=like.device)
        return super().__torch_function__(func, types, args, kwargs or {})

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return _AlwaysEqual.__torch_function__(torch.Tensor.__eq__, (type(self),), (self, other))

    __hash__ = torch.Tensor.__hash__


def scale_overriding_eq(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Overridden ``__eq__``: returns uncomputed memory as a tensor subclass whose every comparison says equal.
    Caught by bench: ``lazy_result`` (a subclass is refused before any comparison runs)."""
    return torch.empty_like(input).as_subclass(_AlwaysEqual)


def scale_in_a_freed_block(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Output in a block the reference just freed: computes nothing and returns fresh memory of the result's
    size, which the allocator hands out from the block the reference's result (same content, same size) was
    freed from a moment ago. Caught by verify, whose unwritten-output check fills freed memory first."""
    return torch.empty_like(input) if out is None else out


#: The tile the hard-coded row was "tuned" for: bench's scale sizes are multiples of it.
HARDCODED_TILE = 1024


def scale_hardcoded_size(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Shape hard-coding: the grid is whole tiles of HARDCODED_TILE elements, right for the benchmark's sizes
    (powers of two); a size with a tail gets the tail left zero. Caught by verify (tail sizes such as 4097)."""
    flat = input.reshape(-1)
    result = torch.zeros_like(flat)
    n = flat.numel() // HARDCODED_TILE * HARDCODED_TILE
    result[:n] = flat[:n] * factor
    result = result.view_as(input)
    return result if out is None else out.copy_(result)


_last: dict[str, Any] = {}
#: Calls closer than this to the previous one (host clock) are "a benchmark loop" to the row below.
CLOSE_S = 0.005


def scale_skipping_close_launches(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch skipping by host-side timing: a call that follows the previous one within CLOSE_S returns the
    previous result (a model's calls are spread out; a benchmark's come back to back). verify does not call it
    back to back; bench does. Caught by bench: ``timed_output_wrong``."""
    now, key = time.monotonic(), (input.shape, input.dtype, input.device)
    previous, _last["at"] = _last.get("at"), now
    if previous is not None and now - previous < CLOSE_S and key in _last:
        result = _last[key]
    else:
        result = input * factor
        _last[key] = result
    return result if out is None else out.copy_(result)


def skipping_at_random(p: float) -> Any:
    """A scale row that skips its work on a fraction ``p`` of calls at random, returning the previous result."""
    rng = random.Random()

    def scale_skipping_at_random(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
        key = ("random", input.shape, input.dtype, input.device)
        if key in _last and rng.random() < p:
            result = _last[key]
        else:
            result = input * factor
            _last[key] = result
        return result if out is None else out.copy_(result)

    scale_skipping_at_random.__doc__ = (f"Probabilistic skipping: {100 * p:.0f} % of calls at random return the "
                                        "previous result. Caught by bench: ``timed_output_wrong`` (29 checked calls)")
    return scale_skipping_at_random


scale_skipping_at_random = skipping_at_random(0.3)


def rms_norm_unit_rms(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """A constant answer that fits one input law: takes every row's RMS to be 1, skipping the reduction. Right
    within a few percent for N(0, 1) inputs (bench's rms_norm case) scaled by factors near 1; wrong for a wide
    spread of magnitudes. Caught by bench: ``timed_output_wrong`` (new content alternates two laws)."""
    result = (x.float() * weight.float()).to(x.dtype)
    return result if out is None else out.copy_(result)


#: The subsampled row reads every this-many elements of a row for its mean square.
SUBSAMPLE = 16


def rms_norm_subsampled(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """A subsampled answer: the mean square of each row from every SUBSAMPLE-th element. Close for i.i.d. inputs
    of one spread; wrong where a few large elements carry the row. Caught by bench: ``timed_output_wrong``."""
    xf = x.float()
    inv = torch.rsqrt(xf[..., ::SUBSAMPLE].square().mean(-1, keepdim=True) + eps)
    result = (xf * inv * weight.float()).to(x.dtype)
    return result if out is None else out.copy_(result)


def forget() -> None:
    """Drop the results the skipping rows keep (each test starts from none)."""
    _last.clear()
