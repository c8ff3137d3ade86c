"""Comparison rules for results the default per-element rule cannot judge: quantised outputs and special values.

``verify`` holds a row to its op's float64 oracle with one rule (rapid_llm.kernels.verification.comparison):
each element within a few units of relative precision of the exact answer. Two kinds of op break it:

- **Quantised output** (``scaled_fp8_quant``): the result is fp8 values on a 3-bit-mantissa grid plus
  fp32 scales. The right question is not "how close" but "how many grid steps": a scale must be the
  oracle's exactly (its reduction, a maximum, has no order to vary), or within ``scale_ulps`` fp32
  steps where an op says its reduction order is free; each fp8 value must be within ``value_ulps``
  (default 1) fp8 steps of the oracle's own rounding of ``x / scale``, a row that multiplies by
  ``1 / scale`` rounds twice and may land one step away near a tie. How many values sit one step off is
  counted and reported, so a row that is "allowed" but sloppy shows.
- **Special values** (``merge_attn_states``): partial attention results with an LSE of +inf, -inf or
  NaN, and a side that is empty. There the contract is exact, not approximate: a NaN where the oracle
  has NaN, the same infinity, and, where the op says so (one side empty: the other side passes
  through), the oracle's value bit for bit. Finite elements elsewhere keep the relative rule, with each
  part of the result judged in its own dtype (an attention output in bf16, its LSE in fp32).

An op opts in by giving its Reference a ``compare`` object: its ``call`` returns every part of the
result as float64, flattened and concatenated in a fixed order, its oracle the same. The object's
``errors(got, exact, args, counts)`` (``args`` as the row got them, in their own dtypes) returns, per element, the absolute difference, what is allowed
there and the scale relative errors are taken against; ``verify`` reduces those as it reduces its own
(bad elements, worst elements, histogram), and ``summary(counts)`` gives the lines the report adds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, MutableMapping, NamedTuple, Protocol, Sequence

import torch

__all__ = ["CompareMode", "CaseErrors", "QuantisedOutput", "SpecialValues", "Part", "FP8_E4M3_MAX",
           "round_to_e4m3", "e4m3_ulps", "fp32_ulps", "exact_agreement"]

#: The largest finite float8_e4m3fn value.
FP8_E4M3_MAX = 448.0
_E4M3_MIN_NORMAL_EXP = -6  # 2^-6 is the smallest normal e4m3fn value
_E4M3_MANTISSA_BITS = 3


class CaseErrors(NamedTuple):
    """Per element of one case: |got - exact| (float64, inf where it disagrees on a special value), what the
    rule allows there, and the scale the relative error is reported against."""

    diff: torch.Tensor
    allowed: torch.Tensor
    scale: torch.Tensor


class CompareMode(Protocol):
    """What verify asks of an op's own comparison rule."""

    rule: str

    def errors(self, got: torch.Tensor, exact: torch.Tensor, args: tuple,
               counts: MutableMapping[str, int]) -> CaseErrors: ...

    def summary(self, counts: Mapping[str, int]) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Part:
    """One part of a concatenated result: its name, how many elements, and the dtype the row wrote it in."""

    name: str
    numel: int
    dtype: torch.dtype


def _split(t: torch.Tensor, parts: Sequence[Part], what: str) -> list[torch.Tensor]:
    total = sum(p.numel for p in parts)
    if t.numel() != total:
        raise ValueError(f"{what}: the result has {t.numel()} elements, its parts ({', '.join(p.name for p in parts)}) "
                         f"{total}")
    return list(torch.split(t.reshape(-1), [p.numel for p in parts]))


def exact_agreement(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|got - exact| in float64, with NaN against NaN and equal infinities as 0 and any other disagreement on a
    non-finite value as inf."""
    d = (got - exact).abs()
    agree = (torch.isnan(got) & torch.isnan(exact)) | (torch.isinf(exact) & (got == exact))
    d = torch.where(agree, torch.zeros_like(d), d)
    return torch.where(torch.isnan(d), torch.full_like(d, math.inf), d)


def _per_element(parts: Sequence[Part], value: Callable[[Part], float], device: torch.device) -> torch.Tensor:
    """``value(part)`` for each element of each part, float64, made on ``device``: a result can hold 100M+
    elements, and filled on the CPU and copied over, these were most of a comparison's time on an H100."""
    return torch.cat([torch.full((p.numel,), value(p), dtype=torch.float64, device=device) for p in parts])


# ------------------------------------------------------------------ fp8 and fp32 grids


def round_to_e4m3(v: torch.Tensor) -> torch.Tensor:
    """``v`` (float64) rounded to the nearest float8_e4m3fn value, ties to even, as float64; exact (one rounding,
    not torch's float64 -> float32 -> fp8 pair). The caller clamps to +-448 first: values past it are not
    saturated here. NaN stays NaN."""
    v = v.to(torch.float64)
    mag = v.abs()
    _, exp = torch.frexp(mag)  # mag = m * 2^exp, m in [0.5, 1): the binade's exponent is exp - 1
    binade = torch.clamp(exp - 1, min=_E4M3_MIN_NORMAL_EXP)  # subnormals share the smallest normal's step
    step = torch.ldexp(torch.ones_like(v), (binade - _E4M3_MANTISSA_BITS).to(torch.int32))
    q = torch.round(mag / step) * step  # mag / step is exact (a power of two); torch.round is half to even
    q = torch.where(mag == 0, mag, q)
    return torch.where(torch.isnan(v), v, torch.copysign(q, v))


def _e4m3_ordinal(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ordinal, is NaN) of float8_e4m3fn values given as float64: consecutive fp8 values have consecutive
    ordinals, +0 and -0 share 0."""
    nan = torch.isnan(v)
    bits = torch.where(nan, torch.zeros_like(v), v).to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int64)
    mag = bits & 0x7F
    return torch.where(bits & 0x80 != 0, -mag, mag), nan


def e4m3_ulps(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """How many float8_e4m3fn steps apart two tensors of fp8 values (as float64) are: 0 for NaN and NaN, inf
    for NaN against a number. A value off the fp8 grid is first rounded onto it (a row's output is on it)."""
    go, gnan = _e4m3_ordinal(round_to_e4m3(got.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)))
    eo, enan = _e4m3_ordinal(round_to_e4m3(exact.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)))
    d = (go - eo).abs().to(torch.float64)
    d = torch.where(gnan | enan, torch.full_like(d, math.inf), d)
    return torch.where(gnan & enan, torch.zeros_like(d), d)


def fp32_ulps(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """How many fp32 steps apart two tensors of fp32 values (as float64) are; NaN rules as for e4m3_ulps."""
    def ordinal(v: torch.Tensor) -> torch.Tensor:
        bits = torch.where(torch.isnan(v), torch.zeros_like(v), v).to(torch.float32).view(torch.int32).to(torch.int64)
        return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    gnan, enan = torch.isnan(got), torch.isnan(exact)
    d = (ordinal(got) - ordinal(exact)).abs().to(torch.float64)
    d = torch.where(gnan | enan, torch.full_like(d, math.inf), d)
    return torch.where(gnan & enan, torch.zeros_like(d), d)


def _allowed_for_ulps(diff: torch.Tensor, ulps: torch.Tensor, limit: int) -> torch.Tensor:
    """An absolute allowance whose ratio to ``diff`` is ``ulps / limit``: an element passes within the limit, and
    the report's "of allowed" is its distance in steps over the limit. With a limit of 0 nothing is allowed."""
    if limit == 0:
        return torch.zeros_like(diff)
    off = (ulps > 0) & torch.isfinite(ulps) & (diff > 0)
    return torch.where(off, diff * limit / torch.where(off, ulps, torch.ones_like(ulps)), torch.ones_like(diff))


# ------------------------------------------------------------------ the two modes


@dataclass(frozen=True)
class QuantisedOutput:
    """fp8 values then fp32 scales: scales exact (or ``scale_ulps`` fp32 steps), values within ``value_ulps``
    fp8 steps of the oracle's rounding. ``parts(*args)`` gives (values, scales) element counts for a case."""

    parts: Callable[..., tuple[int, int]]
    value_ulps: int = 1
    scale_ulps: int = 0

    @property
    def rule(self) -> str:
        scales = "exact" if self.scale_ulps == 0 else f"within {self.scale_ulps} fp32 ulp"
        return (f"quantised output: scales {scales}; fp8 values within {self.value_ulps} fp8 ulp of the float64 "
                "oracle's rounding of x / scale (NaN where it has NaN)")

    def errors(self, got: torch.Tensor, exact: torch.Tensor, args: tuple,
               counts: MutableMapping[str, int]) -> CaseErrors:
        n_values, n_scales = self.parts(*args)
        layout = [Part("values", n_values, torch.float8_e4m3fn), Part("scales", n_scales, torch.float32)]
        got_v, got_s = _split(got, layout, "quantised output (row)")
        ex_v, ex_s = _split(exact, layout, "quantised output (oracle)")
        v_ulps, s_ulps = e4m3_ulps(got_v, ex_v), fp32_ulps(got_s, ex_s)
        v_diff, s_diff = exact_agreement(got_v, ex_v), exact_agreement(got_s, ex_s)
        v_diff = torch.where(torch.isinf(v_ulps), torch.full_like(v_diff, math.inf), v_diff)
        s_diff = torch.where(torch.isinf(s_ulps), torch.full_like(s_diff, math.inf), s_diff)
        allowed = torch.cat([_allowed_for_ulps(v_diff, v_ulps, self.value_ulps),
                             _allowed_for_ulps(s_diff, s_ulps, self.scale_ulps)])
        for key, value in (("values", n_values), ("values 1 ulp off", int((v_ulps == 1).sum())),
                           ("values further off", int((v_ulps > 1).sum())), ("scales", n_scales),
                           ("scales not exact", int((s_ulps > 0).sum()))):
            counts[key] = counts.get(key, 0) + value
        return CaseErrors(torch.cat([v_diff, s_diff]), allowed, exact.abs())

    def summary(self, counts: Mapping[str, int]) -> tuple[str, ...]:
        n = counts.get("values", 0)
        one = counts.get("values 1 ulp off", 0)
        share = f" ({100 * one / n:.3g} %)" if n else ""
        return (f"fp8 values: {one} of {n} one ulp from the oracle's rounding{share}, "
                f"{counts.get('values further off', 0)} further; scales: "
                f"{counts.get('scales', 0) - counts.get('scales not exact', 0)} of {counts.get('scales', 0)} exact",)


@dataclass(frozen=True)
class SpecialValues:
    """Parts in their own dtypes, exact where the contract is exact, relative elsewhere.

    ``parts(*args)`` lists the Parts of a case's result; ``magnitude(*args)`` the per-element scale of the
    relative rule (float64, the result's length); ``exact_where(*args)`` maps each special situation's name
    to a mask (the result's length) where the oracle's value must be matched exactly (NaN by NaN, an
    infinity by itself, a number bit for bit up to the sign of zero). ``ulps`` per dtype (default 2).
    """

    parts: Callable[..., Sequence[Part]]
    magnitude: Callable[..., torch.Tensor]
    exact_where: Callable[..., Mapping[str, torch.Tensor]]
    ulps: Mapping[torch.dtype, float] = ((torch.float32, 8.0),)  # type: ignore[assignment]
    default_ulps: float = 2.0

    def _ulps(self, dtype: torch.dtype) -> float:
        return dict(self.ulps).get(dtype, self.default_ulps)

    @property
    def rule(self) -> str:
        per = ", ".join(f"{str(d).removeprefix('torch.')} {u:g}" for d, u in dict(self.ulps).items())
        return (f"special values: NaN for NaN, each infinity for itself, the op's exact cases bit for bit; finite "
                f"elements |diff| <= ulps x eps(part dtype) x max(|exact|, magnitude) + tiny (ulps {per}, else "
                f"{self.default_ulps:g})")

    def errors(self, got: torch.Tensor, exact: torch.Tensor, args: tuple,
               counts: MutableMapping[str, int]) -> CaseErrors:
        parts = list(self.parts(*args))
        _split(got, parts, "special values (row)")
        magnitude = torch.maximum(exact.abs().nan_to_num(posinf=0.0), self.magnitude(*args).reshape(-1).to(exact))
        eps = _per_element(parts, lambda p: torch.finfo(p.dtype).eps * self._ulps(p.dtype), exact.device)
        tiny = _per_element(parts, lambda p: torch.finfo(p.dtype).tiny, exact.device)
        diff = exact_agreement(got, exact)
        allowed = eps * magnitude + tiny
        must_match = ~torch.isfinite(exact)
        counts["non-finite expected"] = counts.get("non-finite expected", 0) + int(must_match.sum())
        counts["non-finite missed"] = counts.get("non-finite missed", 0) + int((must_match & (diff > 0)).sum())
        for name, mask in self.exact_where(*args).items():
            mask = mask.reshape(-1).to(exact.device)
            counts[name] = counts.get(name, 0) + int(mask.sum())
            counts[f"{name} missed"] = counts.get(f"{name} missed", 0) + int((mask & (diff > 0)).sum())
            must_match = must_match | mask
        # Where the contract is exact, any difference fails: allow nothing (a 0 difference passes).
        allowed = torch.where(must_match, torch.zeros_like(allowed), allowed)
        return CaseErrors(diff, allowed, magnitude)

    def summary(self, counts: Mapping[str, int]) -> tuple[str, ...]:
        names = [k for k in counts if not k.endswith(" missed")]
        return tuple(f"special values, {name}: {counts[name]} elements, {counts.get(name + ' missed', 0)} wrong"
                     for name in names)
