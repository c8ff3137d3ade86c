"""The floor for merge_attn_states: plain torch, runs on every device, dtype and layout.

Two partial attention results over disjoint key sets (a prefix and a suffix, two KV splits) become the
result over their union (section 2.2 of arXiv 2501.01005; vLLM's merge_attn_states contract, written
out-first): ``v_a``, ``v_b``, ``output`` are [T, H, D] in bf16 / fp16 / fp32, ``lse_a``, ``lse_b``,
``output_lse`` are [H, T] fp32 log-sum-exps.

    m = max(lse_a, lse_b);  w_a = exp(lse_a - m);  w_b = exp(lse_b - m);  s = w_a + w_b
    output = v_a * (w_a / s) + v_b * (w_b / s)   (fp32, rounded once);   output_lse = m + log(s)

Special values, the part of the contract every row keeps exactly:

- an LSE of +inf or -inf marks that side empty (vLLM maps +inf to -inf: a fully masked partial);
- one side empty: ``output`` is the other side's values bit for bit (the empty side's values are never
  read into the result, so NaN there does not leak) and ``output_lse`` the other side's LSE;
- both sides empty: ``output`` = 0 and ``output_lse`` = -inf, so merging the result with a third partial gives
  that partial exactly (vLLM's kernel gives NaN here: -inf - -inf);
- a NaN LSE on either side: ``output`` and ``output_lse`` are NaN for that token and head (a corrupt partial is
  not hidden; the +inf rule does not apply to it).
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.platform import describe, must_match

_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_args(op: str, output: torch.Tensor, output_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor,
               v_b: torch.Tensor, lse_b: torch.Tensor) -> None:
    """ValueError or TypeError naming the op and the problem for any argument a row would misread."""
    named = (("output", output), ("output_lse", output_lse), ("v_a", v_a), ("lse_a", lse_a), ("v_b", v_b), ("lse_b", lse_b))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}")
    if v_a.dim() != 3:
        raise ValueError(f"{op}: v_a must be [tokens, heads, head_size], got {describe(v_a)}")
    if v_a.dtype not in _DTYPES:
        raise ValueError(f"{op}: v_a must be bf16, fp16 or fp32, got {v_a.dtype}")
    tokens, heads, _ = v_a.shape
    for name, t in (("output", output), ("v_b", v_b)):
        if t.shape != v_a.shape or t.dtype != v_a.dtype:
            raise ValueError(must_match(op, name, t, "v_a", v_a))
    for t in (output_lse, lse_a, lse_b):
        if tuple(t.shape) != (heads, tokens) or t.dtype != torch.float32:  # the CUDA launcher's words
            raise ValueError(f"{op}: out_lse, lse_a and lse_b must be [heads, tokens] = [{heads}, {tokens}] fp32, got "
                             f"{describe(t)}")
    devices = {t.device for _, t in named}
    if len(devices) != 1:
        raise ValueError(f"{op}: all tensors must be on one device, got {', '.join(sorted(map(str, devices)))}")
    a.no_overlap(op, {"output": output, "output_lse": output_lse},
                 {"v_a": v_a, "lse_a": lse_a, "v_b": v_b, "lse_b": lse_b})


def merge_weights(lse_a: torch.Tensor, lse_b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(p_a, p_b, merged lse, a empty, b empty, NaN) per [H, T] entry, in lse's dtype (the floor: fp32; the
    oracle: float64). p_a and p_b are the sides' weights w / s; both are 0 where both sides are empty."""
    nan = torch.isnan(lse_a) | torch.isnan(lse_b)
    a_empty, b_empty = torch.isinf(lse_a), torch.isinf(lse_b)
    neg_inf = torch.full_like(lse_a, -torch.inf)
    a = torch.where(a_empty, neg_inf, lse_a)
    b = torch.where(b_empty, neg_inf, lse_b)
    both = a_empty & b_empty
    m = torch.where(both, torch.zeros_like(a), torch.maximum(a, b))
    w_a, w_b = torch.exp(a - m), torch.exp(b - m)
    s = w_a + w_b
    s_safe = torch.where(both, torch.ones_like(s), s)
    lse = torch.where(both, neg_inf, m + torch.log(s_safe))
    lse = torch.where(nan, torch.full_like(lse, torch.nan), lse)
    return w_a / s_safe, w_b / s_safe, lse, a_empty, b_empty, nan


def merge_values(v_a: torch.Tensor, v_b: torch.Tensor, p_a: torch.Tensor, p_b: torch.Tensor, a_empty: torch.Tensor,
                 b_empty: torch.Tensor, nan: torch.Tensor) -> torch.Tensor:
    """v_a p_a + v_b p_b over [T, H, D] (weights [H, T]), in v's dtype; one side empty: the other as it is."""
    def per_token(t: torch.Tensor) -> torch.Tensor:
        return t.transpose(0, 1).unsqueeze(-1)

    merged = v_a * per_token(p_a) + v_b * per_token(p_b)
    merged = torch.where(per_token(b_empty), v_a, merged)
    merged = torch.where(per_token(a_empty), torch.where(per_token(b_empty), torch.zeros_like(v_b), v_b), merged)
    return torch.where(per_token(nan), torch.full_like(merged, torch.nan), merged)


def merge_attn_states(output: torch.Tensor, output_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor,
                      v_b: torch.Tensor, lse_b: torch.Tensor) -> None:
    """Merge two partial attention results into output [T, H, D] and output_lse [H, T] (vLLM's contract and
    names, special values in the module docstring); fp32 math, output rounded once. In place, returns None."""
    check_args("merge_attn_states", output, output_lse, v_a, lse_a, v_b, lse_b)
    p_a, p_b, lse, a_empty, b_empty, nan = merge_weights(lse_a.float(), lse_b.float())
    output.copy_(merge_values(v_a.float(), v_b.float(), p_a, p_b, a_empty, b_empty, nan))
    output_lse.copy_(lse)


def check(output: torch.Tensor, output_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor, v_b: torch.Tensor,
          lse_b: torch.Tensor) -> None:
    """merge_attn_states' argument checks, every path's: output and output_lse are written."""
    check_args("merge_attn_states", output, output_lse, v_a, lse_a, v_b, lse_b)


merge_attn_states.check = check
