"""merge_attn_states' float64 reference (inputs, oracle, edge cases), its comparison rule and bench case.

A reference size ``n`` becomes [tokens, heads, head_size]: a multiple of 512 from 1024 up is n // 512
tokens of 4 heads of 128, any other size one token of one head of n (4097: a tail past every vector
width). LSEs are randn * 3, values randn. The edge cases are vLLM's test_merge_attn_states shapes (tokens
256 / 613, heads 4 to 32, head sizes 32 to 256) with its masks (10 % of each side's LSE +inf, never both)
and what its matrix does not hold: -inf LSE, both sides empty, a NaN LSE, NaN values on the empty side
(they must not leak), LSEs 30 and 100 apart (one weight underflows fp32), large LSEs, a head size that is
no multiple of a 16-byte vector.

The op writes into out and out_lse, so ``call`` runs a row on fresh poisoned ones and returns out then
out_lse as float64, flattened and concatenated; the oracle computes the same in float64 by another route
(logaddexp, each side's weight exp(lse - merged lse)) than the floor's (max, exp, sum). The comparison is
the special-values mode: NaN for NaN, -inf for -inf, one side empty bit for bit, both empty exactly
(0, -inf), finite elements within 2 ulps of bf16 / fp16 (8 of fp32, whose exp, log and weights round a
few times) of max(|exact|, magnitude): p_a |v_a| + p_b |v_b| for out, |max lse| + 1 for out_lse (its log
of a sum in [1, 2] is off by an absolute fp32 step).
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference
from rapid_llm.kernels.verification.compare_modes import Part, SpecialValues
from rapid_llm.kernels.verification.defects import output_like

#: The benchmark's heads and head size (the issue's shapes: bf16, 32 heads of 128).
BENCH_HEADS = 32
HEAD_SIZE = 128
#: vLLM test_merge_attn_states' head sizes (tokens 256 / 613 and a few head counts are in edge_cases).
VLLM_HEAD_SIZES = (32, 48, 64, 96, 128, 256)


def shape_of(n: int) -> tuple[int, int, int]:
    if n <= 0:
        return 0, 2, 8
    if n >= 1024 and n % 512 == 0:
        return n // 512, 4, HEAD_SIZE
    return 1, 1, n


def _randn(shape: tuple[int, ...], gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float32) * scale


def case(tokens: int, heads: int, head_size: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator,
         lse_a: torch.Tensor | None = None, lse_b: torch.Tensor | None = None, v_a: torch.Tensor | None = None,
         v_b: torch.Tensor | None = None) -> tuple:
    """(out, out_lse, v_a, lse_a, v_b, lse_b), random where not given (CPU float32 tensors given are moved)."""
    def v(given: torch.Tensor | None) -> torch.Tensor:
        t = _randn((tokens, heads, head_size), gen) if given is None else given
        return t.to(dtype=dtype, device=device)

    def lse(given: torch.Tensor | None) -> torch.Tensor:
        t = _randn((heads, tokens), gen, 3.0) if given is None else given
        return t.to(dtype=torch.float32, device=device)

    va, la, vb, lb = v(v_a), lse(lse_a), v(v_b), lse(lse_b)
    return (torch.empty_like(va), torch.empty_like(la), va, la, vb, lb)


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    return case(*shape_of(shape[0]), dtype, device, gen)


def vllm_masks(heads: int, tokens: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's masks: about 10 % of each side's entries, never the same entry on both sides."""
    a = torch.rand((heads, tokens), generator=gen) < 0.1
    b = torch.rand((heads, tokens), generator=gen) < 0.1
    both = a & b
    return a & ~both, b & ~both


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    cases: list[tuple[str, tuple]] = []
    for tokens, heads, head_size in ((256, 16, 128), (613, 4, 64), (7, 8, 32), (5, 3, 48), (3, 2, 96), (2, 4, 256)):
        la, lb = _randn((heads, tokens), gen), _randn((heads, tokens), gen)
        ma, mb = vllm_masks(heads, tokens, gen)
        la[ma], lb[mb] = float("inf"), float("inf")
        cases.append((f"[{tokens}, {heads}, {head_size}] 10 % of each side +inf (vLLM's matrix)",
                      case(tokens, heads, head_size, dtype, device, gen, la, lb)))
    tokens, heads, head_size = 33, 8, 64
    la, lb = _randn((heads, tokens), gen, 3.0), _randn((heads, tokens), gen, 3.0)
    va, vb = _randn((tokens, heads, head_size), gen), _randn((tokens, heads, head_size), gen)
    la[0, :8], lb[1, :8] = float("-inf"), float("-inf")  # one side empty, by -inf
    la[2, :4], lb[2, :4] = float("-inf"), float("-inf")  # both empty
    la[3, :3], lb[3, 3:6] = float("inf"), float("-inf")  # +inf and -inf together
    la[3, 3:6] = float("inf")
    la[4, :2], lb[5, :2] = float("nan"), float("nan")  # a NaN LSE
    lb[5, 2] = float("inf")
    la[5, 2] = float("nan")  # NaN against an empty side: still NaN
    va[:8, 0] = float("nan")  # the empty side's values: never read into the result
    vb[:8, 1] = float("nan")
    cases.append(("[33, 8, 64] -inf and +inf LSEs, both sides empty, NaN LSEs, NaN values on empty sides",
                  case(tokens, heads, head_size, dtype, device, gen, la, lb, va, vb)))
    la = _randn((4, 16), gen, 3.0)
    cases += [
        ("[16, 4, 128] LSEs 30 apart", case(16, 4, 128, dtype, device, gen, la, la - 30.0)),
        ("[16, 4, 128] LSEs 100 apart (one weight underflows fp32)", case(16, 4, 128, dtype, device, gen, la + 100, la)),
        ("[16, 4, 128] equal LSEs", case(16, 4, 128, dtype, device, gen, la, la.clone())),
        ("[16, 4, 128] LSEs near +-60", case(16, 4, 128, dtype, device, gen, la + 60, la.flip(1) - 60)),
        ("[9, 5, 20] (head size not a 16-byte multiple in bf16)", case(9, 5, 20, dtype, device, gen)),
        ("[4, 3, 1] (head size 1)", case(4, 3, 1, dtype, device, gen)),
        ("[1, 32, 128] (one token, 32 heads)", case(1, 32, 128, dtype, device, gen)),
    ]
    return cases


def _sides(lse_a: torch.Tensor, lse_b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(a, b with +inf as -inf, a empty, b empty, NaN) per [H, T] entry."""
    a_empty, b_empty = torch.isinf(lse_a), torch.isinf(lse_b)
    a = torch.where(a_empty, torch.full_like(lse_a, -torch.inf), lse_a)
    b = torch.where(b_empty, torch.full_like(lse_b, -torch.inf), lse_b)
    return a, b, a_empty, b_empty, torch.isnan(lse_a) | torch.isnan(lse_b)


def _per_token(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(0, 1).unsqueeze(-1)


def _weights(lse_a: torch.Tensor, lse_b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a, b, a_empty, b_empty, nan = _sides(lse_a.to(torch.float64), lse_b.to(torch.float64))
    lse = torch.logaddexp(a, b)  # -inf where both sides are empty
    finite = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p_a = torch.where(a_empty, torch.zeros_like(a), torch.exp(a - finite))
    p_b = torch.where(b_empty, torch.zeros_like(b), torch.exp(b - finite))
    return p_a, p_b, lse, a_empty, b_empty, nan


def oracle(out: torch.Tensor, out_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor, v_b: torch.Tensor,
           lse_b: torch.Tensor) -> torch.Tensor:
    """cat(out, out_lse), float64: each non-empty side's values times exp(its lse - logaddexp(lse_a, lse_b))."""
    p_a, p_b, lse, a_empty, b_empty, nan = _weights(lse_a, lse_b)
    v_a, v_b = v_a.to(torch.float64), v_b.to(torch.float64)
    zero = torch.zeros_like(v_a)
    merged = torch.where(_per_token(a_empty), zero, v_a * _per_token(p_a)) + \
        torch.where(_per_token(b_empty), zero, v_b * _per_token(p_b))
    merged = torch.where(_per_token(nan), torch.full_like(merged, torch.nan), merged)
    lse = torch.where(nan, torch.full_like(lse, torch.nan), lse)
    return torch.cat([merged.flatten(), lse.flatten()])


def parts(out: torch.Tensor, out_lse: torch.Tensor, v_a: torch.Tensor, *rest: object) -> list[Part]:
    return [Part("out", v_a.numel(), v_a.dtype), Part("out_lse", out_lse.numel(), torch.float32)]


def magnitude(out: torch.Tensor, out_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor, v_b: torch.Tensor,
              lse_b: torch.Tensor) -> torch.Tensor:
    """p_a |v_a| + p_b |v_b| for out; |max(lse_a, lse_b)| + 1 for out_lse (NaN-free: special values are exact)."""
    p_a, p_b, _, a_empty, b_empty, _ = _weights(lse_a, lse_b)
    zero = torch.zeros_like(v_a, dtype=torch.float64)
    mag = torch.where(_per_token(a_empty), zero, v_a.to(torch.float64).abs() * _per_token(p_a)) + \
        torch.where(_per_token(b_empty), zero, v_b.to(torch.float64).abs() * _per_token(p_b))
    a, b, *_ = _sides(lse_a.to(torch.float64), lse_b.to(torch.float64))
    m = torch.maximum(a, b).abs() + 1.0
    return torch.cat([mag.flatten(), m.flatten()]).nan_to_num(nan=0.0, posinf=0.0)


def exact_where(out: torch.Tensor, out_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor, v_b: torch.Tensor,
                lse_b: torch.Tensor) -> dict[str, torch.Tensor]:
    """Where the result is the oracle's bit for bit: one side empty, both empty, a NaN LSE."""
    _, _, a_empty, b_empty, nan = _sides(lse_a, lse_b)

    def both_parts(mask: torch.Tensor) -> torch.Tensor:
        return torch.cat([_per_token(mask).expand(v_a.shape).flatten(), mask.flatten()])

    return {"one side empty (the other side bit for bit)": both_parts((a_empty ^ b_empty) & ~nan),
            "both sides empty (0 and LSE -inf)": both_parts(a_empty & b_empty & ~nan),
            "NaN LSE (NaN out and LSE)": both_parts(nan)}


def call(fn, out: torch.Tensor, out_lse: torch.Tensor, v_a: torch.Tensor, lse_a: torch.Tensor, v_b: torch.Tensor,
         lse_b: torch.Tensor) -> torch.Tensor:
    """Run the row on a poisoned out and out_lse; return cat(out, out_lse) as float64."""
    out, out_lse = output_like(out, name="out"), output_like(out_lse, name="out_lse")
    result = fn(out, out_lse, v_a, lse_a, v_b, lse_b)
    if result is not None:
        raise TypeError(f"merge_attn_states writes into out and out_lse and returns None, got {type(result).__name__}")
    return torch.cat([out.to(torch.float64).flatten(), out_lse.to(torch.float64).flatten()])


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """T = max(1, numel // 4096) tokens of 32 heads of 128; an ideal kernel reads both sides and their LSEs
    once and writes out and out_lse once."""
    tokens = max(1, numel // (BENCH_HEADS * HEAD_SIZE))
    shape = (tokens, BENCH_HEADS, HEAD_SIZE)
    v_a = torch.empty(shape, dtype=dtype, device=device).normal_()
    v_b = torch.empty(shape, dtype=dtype, device=device).normal_()
    lse_a = torch.empty((BENCH_HEADS, tokens), dtype=torch.float32, device=device).normal_(0.0, 3.0)
    lse_b = torch.empty((BENCH_HEADS, tokens), dtype=torch.float32, device=device).normal_(0.0, 3.0)
    out, out_lse = torch.empty_like(v_a), torch.empty_like(lse_a)
    return CaseArgs((out, out_lse, v_a, lse_a, v_b, lse_b), {},
                    bytes_moved=3 * v_a.numel() * v_a.element_size() + 3 * lse_a.numel() * 4)


def bench_variant_256x16(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """vLLM PR 16173's small shape: 256 tokens of 16 heads of 128, whatever the size asked."""
    case_args = bench_case(256 * BENCH_HEADS * HEAD_SIZE, dtype, device)
    out, out_lse, v_a, lse_a, v_b, lse_b = case_args.args
    v_a, v_b = v_a[:, :16].contiguous(), v_b[:, :16].contiguous()
    lse_a, lse_b = lse_a[:16].contiguous(), lse_b[:16].contiguous()
    return CaseArgs((torch.empty_like(v_a), torch.empty_like(lse_a), v_a, lse_a, v_b, lse_b), {},
                    bytes_moved=3 * v_a.numel() * v_a.element_size() + 3 * lse_a.numel() * 4)


#: Shapes timed beside the declared one by benchmarks/bench_llm_ops.py.
BENCH_VARIANTS = {"256 tokens x 16 heads (vLLM PR 16173)": bench_variant_256x16}

REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases,
                      compare=SpecialValues(parts=parts, magnitude=magnitude, exact_where=exact_where))
