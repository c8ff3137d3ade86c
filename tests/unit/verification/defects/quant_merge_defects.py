"""Plain-torch rows of scaled_fp8_quant and merge_attn_states, each with one defect the new comparison modes
(rapid_llm.kernels.verification.compare_modes) must catch, and their fixed twins.

Registered as ``external`` CPU rows by test_compare_modes.py. Each has its op's signature; the docstring says
what is wrong and what catches it.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops.attention.merge_attn_states.native import merge_attn_states as merge_fixed
from rapid_llm.kernels.ops.quant.scaled_fp8_quant.native import (FP8_MAX, check_args, dynamic_scales, group_amax,
                                                                 scaled_fp8_quant)

#: The largest finite value of float8_e4m3fnuz, the other fp8 e4m3 format: a clamp meant for it.
FNUZ_MAX = 240.0


def _quantise(out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool, *, scale_rule=None,
              limit: float = FP8_MAX, truncate: bool = False) -> None:
    n_groups, size = check_args("scaled_fp8_quant", out, x, scales, static)
    groups = x.reshape(n_groups, size).float()
    if static:
        scale = scales.reshape(n_groups, 1)
    else:
        scale = (scale_rule or dynamic_scales)(group_amax(groups)).unsqueeze(-1)
        scales.copy_(scale.reshape(scales.shape))
    q = (groups / scale).clamp(-limit, limit)
    if truncate:  # toward zero: one fp8 step down wherever the nearest value is larger in magnitude
        bits = q.to(torch.float8_e4m3fn).view(torch.uint8)
        down = (bits.view(torch.float8_e4m3fn).float().abs() > q.abs()) & ((bits & 0x7F) > 0)
        q = torch.where(down, bits - 1, bits).view(torch.float8_e4m3fn).float()
    out.copy_(q.reshape(out.shape))


def scaled_fp8_quant_fixed(out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> None:
    """The fixed twin: the native floor."""
    scaled_fp8_quant(out, x, scales, static)


def scaled_fp8_quant_rounds_scale(out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> None:
    """DEFECT: the scale rounded up to a power of two (a common shortcut: the division becomes exact). Values
    are consistent with that scale, so only the exact comparison of scales catches it."""
    def pow2(amax: torch.Tensor) -> torch.Tensor:
        return torch.exp2(torch.ceil(torch.log2(dynamic_scales(amax))))

    _quantise(out, x, scales, static, scale_rule=pow2)


def scaled_fp8_quant_clamps_wrong(out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> None:
    """DEFECT: clamps to +-240 (e4m3fnuz's range) before the e4m3fn cast: every value past 240 is several fp8
    ulps low."""
    _quantise(out, x, scales, static, limit=FNUZ_MAX)


def scaled_fp8_quant_truncates(out: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> None:
    """Not a defect the rule fails: rounds toward zero, never more than one fp8 ulp off, so it passes, and the
    report's count of one-ulp values (about half of them) is what shows it."""
    _quantise(out, x, scales, static, truncate=True)


def merge_attn_states_fixed(out: torch.Tensor, out_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor,
                            v_b: torch.Tensor, lse_b: torch.Tensor) -> None:
    """The fixed twin: the native floor."""
    merge_fixed(out, out_lse, v_a, lse_a, v_b, lse_b)


def merge_attn_states_nan_for_empty_side(out: torch.Tensor, out_lse: torch.Tensor, v_a: torch.Tensor,
                                         lse_a: torch.Tensor, v_b: torch.Tensor, lse_b: torch.Tensor) -> None:
    """DEFECT: the textbook formula with no special values: a +inf LSE makes max(a, b) = inf and inf - inf NaN,
    so a side marked empty by +inf turns the result NaN (and both sides -inf too)."""
    a, b = lse_a.float(), lse_b.float()
    m = torch.maximum(a, b)
    w_a, w_b = torch.exp(a - m), torch.exp(b - m)
    s = w_a + w_b
    p_a, p_b = (w_a / s).transpose(0, 1).unsqueeze(-1), (w_b / s).transpose(0, 1).unsqueeze(-1)
    out.copy_(v_a.float() * p_a + v_b.float() * p_b)
    out_lse.copy_(m + torch.log(s))


def merge_attn_states_reads_empty_side(out: torch.Tensor, out_lse: torch.Tensor, v_a: torch.Tensor,
                                       lse_a: torch.Tensor, v_b: torch.Tensor, lse_b: torch.Tensor) -> None:
    """DEFECT: maps +inf to -inf (vLLM's kernel) but multiplies the empty side's values by its zero weight: a NaN
    there leaks into the result (0 * NaN), where the contract passes the other side through."""
    a = torch.where(torch.isinf(lse_a), torch.full_like(lse_a, -torch.inf), lse_a.float())
    b = torch.where(torch.isinf(lse_b), torch.full_like(lse_b, -torch.inf), lse_b.float())
    both = torch.isinf(a) & torch.isinf(b)
    m = torch.where(both, torch.zeros_like(a), torch.maximum(a, b))
    w_a, w_b = torch.exp(a - m), torch.exp(b - m)
    s = torch.where(both, torch.ones_like(a), w_a + w_b)
    p_a, p_b = (w_a / s).transpose(0, 1).unsqueeze(-1), (w_b / s).transpose(0, 1).unsqueeze(-1)
    out.copy_(v_a.float() * p_a + v_b.float() * p_b)
    out_lse.copy_(torch.where(both, torch.full_like(a, -torch.inf), m + torch.log(s)))
