"""The comparison rule: how far a row's result may sit from the float64 oracle, in ulps of the exact result.

The rule, per case (one reference input set) and element ``i``, with ``eps`` and
``tiny`` of the row's dtype and ``k`` the op's ``baseline_factor`` (default 2)::

    allowed_i = max(B * eps * m_i + tiny,  k * |floor_i - exact_i|)
    B         = max(stated,  k * F)
    stated    = ulps + (FP32_MATH_ULPS if the result is fp32 else 0)
    F         = max over the case of |floor_i - exact_i| / (eps * m_i)

A row passes a dtype when ``|row_i - exact_i| <= allowed_i`` for every element.
``m_i`` is ``|exact_i|``, or the larger of it and the op's declared ``magnitude``
where cancellation makes the result smaller than what was rounded on the way (a
rotation's ``|x cos| + |y sin|``); ``eps * m_i`` is one ulp of it.

``stated`` is the bound every row, the native floor included, is held to: the op's
``ulps`` (default 2), and for an fp32 result FP32_MATH_ULPS more for the fp32 math
itself, which no rounding to a half type hides (10 ulps by default). ``F`` calibrates
the bound on the floor's own error over the whole case, not element by element
(where the floor happens to be exact a correct row is still a few ulps off); it
counts elements whose ulp ``eps * m_i`` is a normal number and whose floor error is
finite, and the floor checking itself is held to ``stated``. Why these numbers:
docs/kernel-conventions.md, "Verification", the rule's one statement for kernel authors.

An explicit ``tolerance`` replaces the rule with an absolute bound per dtype.
An op whose result this rule cannot judge (fp8 values and their scales; special
values such as an infinite LSE) gives its Reference a ``compare`` mode, which
replaces the rule and adds its own lines to the report
(rapid_llm.kernels.verification.compare_modes).

NaN in a result counts as an infinite error unless the exact answer is NaN
too; an infinity counts as exact where the oracle's answer rounds to the same one.

``verify`` (rapid_llm.kernels.verification.golden) reduces every reference case
through :func:`compare_case`; tests that compare a result with an oracle call
:func:`element_errors`, the same rule without a floor, so one property is
judged by one rule everywhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import torch

from rapid_llm.kernels.registry.opdecl import Reference
from rapid_llm.kernels.verification.compare_modes import CaseErrors
from rapid_llm.kernels.verification.report import ElementDiff, GoldenError

__all__ = ["TOP_K", "HISTOGRAM_SAMPLES", "FP32_MATH_ULPS", "CaseErrors", "Accumulator", "abs_diff", "element_errors",
           "allowed_error", "stated_ulps", "ulps_of", "case_errors", "compare_case", "abs_tolerance",
           "rule_text", "to64"]

#: Worst elements kept per dtype, and how many |diff| values feed the histogram.
TOP_K = 5
HISTOGRAM_SAMPLES = 200_000

#: What an fp32 result may carry beyond the op's ``ulps``: the fp32 computation's own error (the module says why).
FP32_MATH_ULPS = 8.0


def abs_diff(got: torch.Tensor, want: torch.Tensor, want_rounded: torch.Tensor) -> torch.Tensor:
    """|got - want| in float64; agreeing infinities and NaNs count as exact, any other NaN as infinite."""
    d = (got - want).abs()
    agree = (torch.isinf(want_rounded) & (got == want_rounded)) | (torch.isnan(got) & torch.isnan(want))
    d = torch.where(agree, torch.zeros_like(d), d)
    return torch.where(torch.isnan(d), torch.full_like(d, math.inf), d)


def to64(args: tuple) -> tuple:
    """The arguments with every floating tensor in float64: what an oracle is called with. An fp8 tensor stays
    as it is: its dtype is a format the oracle must know (an fp8 KV cache is written quantised, a cache in the
    input's dtype is written as a copy), and its values are exact in float64 wherever the oracle reads them."""
    return tuple(a.to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point()
                 and a.element_size() > 1 else a for a in args)


def allowed_error(scale: torch.Tensor, dtype: torch.dtype, *, ulps: float) -> torch.Tensor:
    """The rule's relative term per element: ``ulps * eps * m + tiny`` in ``dtype`` (an infinite ``m`` sets none)."""
    info = torch.finfo(dtype)
    return ulps * info.eps * scale.nan_to_num(posinf=0.0) + info.tiny


def stated_ulps(ref: Reference, dtype: torch.dtype) -> float:
    """The bound in ulps of ``m`` that every row of ``ref``'s op, its floor included, is held to in ``dtype``."""
    return ref.ulps + (FP32_MATH_ULPS if dtype == torch.float32 else 0.0)


def ulps_of(diff: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> float:
    """The largest of ``diff`` in ulps of ``scale`` (``eps * m`` in ``dtype``), over the elements whose ulp is a
    normal number and whose diff is finite; 0 where there are none."""
    info = torch.finfo(dtype)
    ulp = info.eps * scale
    counted = torch.isfinite(diff) & torch.isfinite(ulp) & (ulp >= info.tiny)
    ratio = torch.where(counted, diff / torch.where(counted, ulp, torch.ones_like(ulp)), torch.zeros_like(diff))
    return float(ratio.max()) if ratio.numel() else 0.0


def element_errors(got: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype | None = None, *,
                   ulps: float, magnitude: torch.Tensor | None = None) -> CaseErrors:
    """Per element: |got - exact|, what the rule allows there (:func:`allowed_error`), and ``m``.

    ``dtype`` is the one the row computed in (default ``got.dtype``); ``exact`` is float64 on
    ``got``'s device. The floor's terms of the rule are :func:`case_errors`'s.
    """
    dtype = got.dtype if dtype is None else dtype
    scale = exact.abs() if magnitude is None else torch.maximum(exact.abs(), magnitude.to(exact.device))
    d = abs_diff(got.to(torch.float64), exact, exact.to(dtype).to(torch.float64))
    return CaseErrors(d, allowed_error(scale, dtype, ulps=ulps), scale)


@dataclass
class Accumulator:
    """Running reduction over one dtype's cases."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    vs_base: float | None = None
    base_err: float | None = None
    n: int = 0
    bad: int = 0
    worst: list[ElementDiff] = field(default_factory=list)
    samples: list[torch.Tensor] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # kept by an op's own comparison rule
    error: str | None = None
    ulps: float | None = None        # the row's largest error in ulps of m (None: judged by another rule)
    bound_ulps: float | None = None  # the largest B a case allowed


def case_errors(got: torch.Tensor, exact: torch.Tensor, base: torch.Tensor | None, dtype: torch.dtype,
                ref: Reference, abs_tol: float | None, base_sets_bar: bool, magnitude: torch.Tensor | None = None,
                args: tuple = (), counts: dict[str, int] | None = None) -> tuple[CaseErrors, float | None]:
    """One case judged by the rule: per element |got - exact|, what is allowed there and ``m``; and ``B``, the
    case's bound in ulps (None where an absolute tolerance or the op's own ``compare`` mode judged it)."""
    if ref.compare is not None:  # the op's own rule (verification.compare_modes): quantised values, special values
        return ref.compare.errors(got.to(torch.float64), exact, args, {} if counts is None else counts), None
    errors = element_errors(got, exact, dtype, ulps=ref.ulps, magnitude=magnitude)
    if abs_tol is not None:
        return CaseErrors(errors.diff, torch.full_like(errors.diff, abs_tol), errors.scale), None
    bound = stated_ulps(ref, dtype)
    if base is None or not base_sets_bar:
        return CaseErrors(errors.diff, allowed_error(errors.scale, dtype, ulps=bound), errors.scale), bound
    base_err = abs_diff(base.to(torch.float64), exact, exact.to(dtype).to(torch.float64))
    finite_err = torch.where(torch.isfinite(base_err), base_err, torch.zeros_like(base_err))
    bound = max(bound, ref.baseline_factor * ulps_of(finite_err, errors.scale, dtype))
    allowed = torch.maximum(allowed_error(errors.scale, dtype, ulps=bound), ref.baseline_factor * finite_err)
    return CaseErrors(errors.diff, allowed, errors.scale), bound


def compare_case(acc: Accumulator, label: str, got: torch.Tensor, exact: torch.Tensor, base: torch.Tensor | None,
                 dtype: torch.dtype, ref: Reference, abs_tol: float | None, budget: int, base_sets_bar: bool,
                 magnitude: torch.Tensor | None = None, args: tuple = ()) -> int:
    """Judge one case by the rule, fold it into ``acc``, and return how many elements fail."""
    if got.shape != exact.shape:
        raise GoldenError(f"case {label}: row returned shape {tuple(got.shape)}, expected {tuple(exact.shape)}")
    if exact.numel() == 0:
        return 0  # an empty case has no element to judge: its verdict is the shape above
    info = torch.finfo(dtype)
    got64 = got.to(torch.float64)
    (d, allowed, scale), bound = case_errors(got, exact, base, dtype, ref, abs_tol, base_sets_bar, magnitude, args,
                                             acc.counts)
    if ref.compare is None:
        acc.ulps = max(acc.ulps or 0.0, ulps_of(d, scale, dtype))
    if bound is not None:
        acc.bound_ulps = max(acc.bound_ulps or 0.0, bound)
    base64 = None
    if base is not None:
        base64 = base.to(torch.float64)
        base_err = abs_diff(base64, exact, exact.to(dtype).to(torch.float64))
        acc.base_err = max(acc.base_err or 0.0, float(base_err.max()))
        acc.vs_base = max(acc.vs_base or 0.0, float(abs_diff(got64, base64, base64).max()))
    rel = (d / scale.clamp_min(info.tiny).nan_to_num(nan=info.tiny)).nan_to_num(nan=math.inf)
    ratio = torch.where(d == 0, torch.zeros_like(d), d / allowed)
    acc.max_abs = max(acc.max_abs, float(d.max()))
    acc.max_rel = max(acc.max_rel, float(rel.max()))
    acc.n += d.numel()
    bad = int((d > allowed).sum())
    acc.bad += bad
    flat = ratio.flatten()
    top = torch.topk(flat, min(TOP_K, flat.numel())).indices.tolist()
    for i in top:
        idx = tuple(int(j) for j in torch.unravel_index(torch.tensor(i), d.shape)) if d.dim() else ()
        acc.worst.append(ElementDiff(label, idx, got64.flatten()[i].item(), exact.flatten()[i].item(),
                                     None if base64 is None else base64.flatten()[i].item(),
                                     d.flatten()[i].item(), allowed.flatten()[i].item()))
    acc.worst.sort(key=lambda e: (-e.ratio, -e.abs_diff))
    del acc.worst[TOP_K:]
    step = max(1, d.numel() // max(budget, 1))
    acc.samples.append(d.flatten()[::step].to("cpu", torch.float64))
    return bad


def abs_tolerance(tolerance: float | Mapping[str, float] | None, dtype: str) -> float | None:
    """The absolute bound ``verify(tolerance=...)`` sets for ``dtype``, or None (the rule applies)."""
    if tolerance is None:
        return None
    if isinstance(tolerance, Mapping):
        value = tolerance.get(dtype)
    else:
        value = tolerance
    if value is not None and not value >= 0:
        raise GoldenError(f"tolerance for {dtype} must be >= 0, got {value!r}")
    return None if value is None else float(value)


def rule_text(ref: Reference, abs_tol: float | None) -> str:
    """The rule a dtype was judged by, as the report states it."""
    if ref.compare is not None:
        return ref.compare.rule
    if abs_tol is not None:
        return f"|diff| <= {abs_tol:g}"
    m = "|exact|" if ref.magnitude is None else "max(|exact|, the op magnitude)"
    return (f"|diff| <= B ulps of m + tiny per element, B = max({ref.ulps:g} ({stated_ulps(ref, torch.float32):g} "
            f"for fp32), {ref.baseline_factor:g} x the floor's largest error in ulps over the case), m = {m}")
