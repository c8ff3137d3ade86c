"""The float64 oracles rows are checked against, and how close a rounded result must be.

Rows are compared with an oracle, never with each other: two rows can share a
bug. Each op has one oracle, the one its declaration holds (its group's
reference module); :func:`oracle` returns it, so tests, notebooks and
``verify`` check against the same function. Closeness is judged by verify's
rule (rapid_llm.kernels.verification.comparison), at the ``ulps`` a test asks
for: ``tolerance`` is the bound of one rounding, ``assert_close_to_ref`` the check.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification import comparison

#: A result rounded once into its dtype (or via fp32) is within one eps of relative precision.
ONE_ROUNDING = 1.0


def oracle(op: str) -> Callable[..., Any]:
    """The float64 oracle op ``op`` declared."""
    return spec.get_decl(op).reference.oracle


def scale_ref(x: torch.Tensor, factor: float) -> torch.Tensor:
    """out = x * factor, exactly (in float64): scale's declared oracle."""
    return oracle("scale")(x, factor)


def tolerance(dtype: torch.dtype, ref: torch.Tensor) -> torch.Tensor:
    """Elementwise bound for a result rounded once (or twice, via fp32) into ``dtype``: verify's rule at one ulp.

    One rounding into ``dtype`` is at most half an ulp: eps/2 * |ref|. A row
    that computes in fp32 and then rounds into a half type can be off by one
    more fp32 rounding, far below the half-type ulp; ``eps * |ref|`` covers both
    with margin, plus the smallest normal for values near zero.
    """
    return comparison.allowed_error(ref.abs(), dtype, ulps=ONE_ROUNDING)


def assert_close_to_ref(out: torch.Tensor, ref: torch.Tensor, what: str, *, ulps: float = ONE_ROUNDING,
                        magnitude: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> None:
    """Fail with the worst element where ``out`` is further from the float64 ``ref`` than verify's rule
    (rapid_llm.kernels.verification.comparison) allows at ``ulps`` of ``dtype`` (default ``out.dtype``: the
    precision the result was computed in); NaN passes only where ``ref`` is NaN."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if out.numel() == 0:
        return
    errors = comparison.element_errors(out.cpu(), ref.cpu().to(torch.float64), dtype, ulps=ulps,
                                       magnitude=None if magnitude is None else magnitude.cpu())
    bad = errors.diff > errors.allowed
    if bool(bad.any()):
        i = int(torch.argmax((errors.diff / errors.allowed).flatten()))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {out.numel()} elements off; worst at flat index {i}: "
            f"got {out.flatten()[i].item()!r}, expected {ref.flatten()[i].item()!r}"
        )


def exact_answer(op: str, args: tuple) -> torch.Tensor:
    """Op ``op``'s float64 oracle on ``args``, flat as its reference call returns a row's result."""
    return spec.get_decl(op).reference.oracle(*comparison.to64(args))


def assert_by_compare_mode(op: str, fn: Callable[..., Any], args: tuple,
                           where: Callable[[int], str] = lambda i: str(i), *, exact: torch.Tensor | None = None,
                           what: str | None = None) -> dict[str, int]:
    """Run ``fn`` through op's reference call and judge it by the op's comparison mode
    (rapid_llm.kernels.verification.compare_modes), element by element; returns the mode's counts.
    ``where(i)`` names flat element ``i`` in the message (a quantiser's value or scale); ``exact`` is
    :func:`exact_answer` when the caller already has it (several rows on one case: one oracle run);
    ``what`` names the row and case in the message (default: the op)."""
    ref = spec.get_decl(op).reference
    got = ref.call(fn, *args)
    exact = (exact_answer(op, args) if exact is None else exact).to(got.device)
    counts: dict[str, int] = {}
    errs = ref.compare.errors(got, exact, args, counts)
    bad = errs.diff > errs.allowed
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(f"{what or op}: {int(bad.sum())} elements off; first at {where(i)} of {got.numel()}: "
                             f"got {got[i].item()!r}, exact {exact[i].item()!r}, allowed {errs.allowed[i].item()!r}")
    return counts


def assert_rows_by_compare_mode(op: str, rows: Mapping[str, Callable[..., Any]], args: tuple, case: str,
                                where: Callable[[int], str] = lambda i: str(i)) -> dict[str, dict[str, int]]:
    """:func:`assert_by_compare_mode` for each of ``rows`` (name -> callable) on one case, with one oracle run
    for them all (on a large case the oracle and its float64 copies cost more than a row's call); a failure
    names the row and ``case``. Returns each row's counts by name."""
    exact = exact_answer(op, args)
    return {name: assert_by_compare_mode(op, fn, args, where, exact=exact, what=f"{op} {name} at {case}")
            for name, fn in rows.items()}


def exact_distribution(op: str, args: tuple) -> torch.Tensor:
    """A sampling op's exact renormalised distribution, float64 [rows, vocab], one row per distinct row of the call:
    its comparison mode's view (rapid_llm.kernels.verification.sampling_mode) on ``args`` in float64."""
    return spec.get_decl(op).reference.compare.view(*comparison.to64(args)).probs
