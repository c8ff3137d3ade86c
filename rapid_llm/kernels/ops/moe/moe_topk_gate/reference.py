"""moe_topk_gate's float64 reference (inputs, oracle, edge cases), its comparison rule and bench cases.

A reference size ``n`` picks a gate and a token count: a multiple of 256 is DeepSeek-V3's gate (256
experts, sigmoid, correction bias, 8 groups of which 4 are kept, k = 8, renormalised) for n // 256 tokens;
1 is Mixtral's (8 experts, softmax, k = 2) for one token; any other size 64 experts, softmax, k = 6,
not renormalised, for n // 64 tokens (4097: 64 tokens). The edge cases are where a gate goes wrong: exact
ties (logits drawn from a few values, all-equal rows, all-equal groups), k = E, one token, large
and very negative logits, NaN and -inf logits, grouped choice without bias, softmax with bias. No tokens
(T = 0) is every row's contract test (make_inputs((0,)), tests/contract/test_rows.py), not a verify case:
the comparison's baseline error has no maximum over nothing.

The oracle ranks in float64 by another route than the floor's stable sort: numpy's lexsort on the keys
(dropped group, -choice, expert id), with the op's tie rule (rapid_llm.kernels.ops.moe.moe_topk_gate.native).
``call`` runs a row on poisoned out_weights / out_ids and returns the weights then the ids as float64; the
comparison is the routing mode (rapid_llm.kernels.verification.routing_mode).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference
from rapid_llm.kernels.verification.defects import output_like
from rapid_llm.kernels.verification.routing_mode import RoutingOutput, RoutingView

#: DeepSeek-V3's gate: the bench case's shape.
DSV3_EXPERTS, DSV3_GROUPS, DSV3_TOPK_GROUPS, DSV3_K = 256, 8, 4, 8
#: Mixtral's gate: the other bench form.
MIXTRAL_EXPERTS, MIXTRAL_K = 8, 2
MIXTRAL_FORM = "softmax, 8 experts, k = 2 (Mixtral)"
_EPS32 = float(torch.finfo(torch.float32).eps)
_TINY32 = float(torch.finfo(torch.float32).tiny)
#: fp32 ulps of slack in a choice value (its score's rounding and the bias's addition).
_CHOICE_ULPS = 8.0


def gate_args(logits: torch.Tensor, k: int, scoring: str = "softmax", renormalize: bool = True,
              bias: torch.Tensor | None = None, num_groups: int = 1, topk_groups: int = 1) -> tuple:
    """The op's positional arguments (every row takes all seven)."""
    return (logits, k, scoring, renormalize, bias, num_groups, topk_groups)


def _randn(shape: tuple[int, ...], gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float32) * scale


def dsv3(tokens: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    logits = _randn((tokens, DSV3_EXPERTS), gen, 2.0).to(dtype=dtype, device=device)
    bias = _randn((DSV3_EXPERTS,), gen, 0.05).to(device)
    return gate_args(logits, DSV3_K, "sigmoid", True, bias, DSV3_GROUPS, DSV3_TOPK_GROUPS)


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    n = shape[0]
    if n <= 0:
        return dsv3(0, dtype, device, gen)
    if n % DSV3_EXPERTS == 0:
        return dsv3(n // DSV3_EXPERTS, dtype, device, gen)
    if n == 1:
        return gate_args(_randn((1, MIXTRAL_EXPERTS), gen, 2.0).to(dtype=dtype, device=device), MIXTRAL_K)
    return gate_args(_randn((max(1, n // 64), 64), gen, 2.0).to(dtype=dtype, device=device), 6, "softmax", False)


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    def x(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype=dtype, device=device)

    pool = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    repeated = pool[torch.randint(0, 4, (16, 64), generator=gen)]
    flat = torch.tensor([0.0, 1.5, -3.0, 7.0, -0.25])[:, None].expand(5, 16).contiguous()
    grouped_flat = torch.zeros(4, 32)
    grouped_flat[1] = 0.75
    grouped_flat[2, 8:] = 1.0  # groups 1..3 tie above group 0
    nan_rows = _randn((3, 16), gen, 2.0)
    nan_rows[0, 5] = float("nan")
    nan_rows[1, :] = float("nan")
    masked = _randn((6, 16), gen, 2.0)
    masked[:, ::3] = -float("inf")  # experts masked out by -inf
    masked[5, :] = -float("inf")
    zeros = torch.zeros(DSV3_EXPERTS, device=device)
    bias = _randn((64,), gen, 0.1).to(device)
    cases = [
        ("[16, 64] logits from 4 values (exact ties), softmax k = 8", gate_args(x(repeated), 8)),
        ("[16, 64] logits from 4 values, sigmoid k = 8, 8 groups keep 2, zero bias",
         gate_args(x(repeated), 8, "sigmoid", True, torch.zeros(64, device=device), 8, 2)),
        ("[5, 16] all-equal rows, sigmoid k = 4", gate_args(x(flat), 4, "sigmoid")),
        ("[5, 16] all-equal rows, softmax k = 3, not renormalised", gate_args(x(flat), 3, "softmax", False)),
        ("[4, 32] all-equal groups, sigmoid k = 4, 4 groups keep 2",
         gate_args(x(grouped_flat), 4, "sigmoid", True, None, 4, 2)),
        ("[7, 8] k = E = 8, softmax", gate_args(x(_randn((7, 8), gen, 2.0)), 8)),
        ("[1, 256] one token, DeepSeek-V3's gate", dsv3(1, dtype, device, gen)),
        ("[1, 256] one token, zero bias, DeepSeek-V3's grouping",
         gate_args(x(_randn((1, 256), gen)), 8, "sigmoid", True, zeros, 8, 4)),
        ("[8, 32] large logits (x 1000), softmax k = 4", gate_args(x(_randn((8, 32), gen, 1000.0)), 4)),
        ("[8, 16] very negative logits (-60 - |x|: scores near 1e-27), sigmoid k = 2",
         gate_args(x(-60.0 - _randn((8, 16), gen).abs()), 2, "sigmoid")),
        ("[33, 8] Mixtral's gate, k = 2", gate_args(x(_randn((33, 8), gen, 2.0)), 2)),
        ("[9, 64] sigmoid k = 6, 8 groups keep 3, no bias, not renormalised",
         gate_args(x(_randn((9, 64), gen, 2.0)), 6, "sigmoid", False, None, 8, 3)),
        ("[9, 64] softmax k = 5 with bias, 4 groups keep 2",
         gate_args(x(_randn((9, 64), gen, 2.0)), 5, "softmax", True, bias, 4, 2)),
        ("[6, 16] k = 1, sigmoid", gate_args(x(_randn((6, 16), gen, 2.0)), 1, "sigmoid")),
        ("[5, 48] sigmoid k = 4 with bias, 4 groups of 12 keep 2 (no power of two)",
         gate_args(x(_randn((5, 48), gen, 2.0)), 4, "sigmoid", True, _randn((48,), gen, 0.1).to(device), 4, 2)),
        ("[5, 48] softmax k = 3, 3 groups keep 2, all-equal rows",
         gate_args(x(torch.zeros(5, 48)), 3, "softmax", True, None, 3, 2)),
        ("[3, 16] a NaN logit, a NaN row, sigmoid k = 4", gate_args(x(nan_rows), 4, "sigmoid")),
        ("[3, 16] a NaN logit, a NaN row, softmax k = 4", gate_args(x(nan_rows), 4)),
        ("[6, 16] -inf logits (masked experts, one row all masked), sigmoid k = 6",
         gate_args(x(masked), 6, "sigmoid")),
    ]
    return cases


# ------------------------------------------------------------------ the oracle


def scores64(logits: torch.Tensor, scoring: str) -> torch.Tensor:
    """Unbiased scores in float64: exp(x - max) / sum (NaN across a row with NaN or +inf), or 1 / (1 + exp(-x))."""
    x = logits.to(torch.float64)
    if scoring == "softmax":
        e = torch.exp(x - x.amax(dim=-1, keepdim=True)) if x.shape[-1] else x
        return e / e.sum(dim=-1, keepdim=True)
    return 1.0 / (1.0 + torch.exp(-x))


def _key(v: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(v), -np.inf, v)


def _lexrank(key: np.ndarray, dropped: np.ndarray | None = None) -> np.ndarray:
    """Indices best first along the last axis: kept before dropped, higher key first, lower index first."""
    ids = np.broadcast_to(np.arange(key.shape[-1]), key.shape)
    keys = (ids, -key) if dropped is None else (ids, -key, dropped)
    return np.lexsort(keys, axis=-1) if key.size else np.zeros(key.shape, dtype=np.int64)


def _group_scores(key: np.ndarray, num_groups: int) -> np.ndarray:
    tokens, experts = key.shape
    grouped = np.sort(key.reshape(tokens, num_groups, experts // num_groups), axis=-1)
    return grouped[..., -1] + grouped[..., -2]


def oracle_ids(args64: tuple) -> torch.Tensor:
    """The chosen expert ids [T, k] (int64) under the tie rule, ranked in float64."""
    logits, k, scoring, _, bias, num_groups, topk_groups = args64
    choice = scores64(logits, scoring)
    if bias is not None:
        choice = choice + bias.to(torch.float64)
    key = _key(choice.cpu().numpy())
    tokens, experts = key.shape
    dropped = None
    if num_groups > 1:
        kept = _lexrank(_key(_group_scores(key, num_groups)))[:, :topk_groups]
        keep = np.zeros((tokens, num_groups), dtype=bool)
        np.put_along_axis(keep, kept, True, axis=1)
        dropped = ~np.repeat(keep, experts // num_groups, axis=1)
        key = np.where(dropped, -np.inf, key)
        dropped = dropped.astype(np.int64)
    return torch.from_numpy(np.ascontiguousarray(_lexrank(key, dropped)[:, :k])).to(logits.device)


def oracle(logits: torch.Tensor, k: int, scoring: str = "softmax", renormalize: bool = True,
           bias: torch.Tensor | None = None, num_groups: int = 1, topk_groups: int = 1) -> torch.Tensor:
    """cat(weights, ids), float64: the chosen experts' unbiased scores (over their sum when renormalised)."""
    args = (logits, k, scoring, renormalize, bias, num_groups, topk_groups)
    ids = oracle_ids(args)
    w = torch.gather(scores64(logits, scoring), 1, ids)
    if renormalize:
        s = w.sum(dim=1, keepdim=True)
        w = torch.where(s > 0, w / torch.where(s > 0, s, torch.ones_like(s)), w)
    return torch.cat([w.flatten(), ids.to(torch.float64).flatten()])


def view(logits: torch.Tensor, k: int, scoring: str = "softmax", renormalize: bool = True,
         bias: torch.Tensor | None = None, num_groups: int = 1, topk_groups: int = 1) -> RoutingView:
    """What the routing rule needs of a case: float64 scores, choice values (groups within rounding of the
    last kept one stay in the choice), each choice value's fp32 slack, and the weights' error factor."""
    x = logits.to(torch.float64)
    scores = scores64(logits, scoring)
    b = torch.zeros_like(scores) if bias is None else bias.to(torch.float64).expand_as(scores)
    if scoring == "softmax":
        z = x - x.amax(dim=-1, keepdim=True) if x.shape[-1] else x
        cond = 1.0 + z.abs() + math.log2(max(2, x.shape[-1]))
    else:
        cond = 1.0 + (-x).clamp_min(0.0)
    cond = cond.nan_to_num(nan=1.0, posinf=1.0, neginf=1.0)
    slack = _CHOICE_ULPS * _EPS32 * (cond * scores.abs() + b.abs()).nan_to_num(nan=0.0, posinf=0.0) + 2 * _TINY32
    choice = (scores + b).nan_to_num(nan=-math.inf)
    if num_groups > 1 and scores.shape[0]:
        tokens, experts = choice.shape
        size = experts // num_groups
        best2 = torch.sort(choice.view(tokens, num_groups, size), dim=-1, descending=True).values[..., :2]
        group = best2.sum(-1).nan_to_num(nan=-math.inf)
        last_kept = torch.sort(group, dim=-1, descending=True).values[:, topk_groups - 1:topk_groups]
        group_slack = 2 * slack.view(tokens, num_groups, size).amax(-1)
        eligible = (group >= last_kept - group_slack) | (group == last_kept)
        mask = eligible.repeat_interleave(size, dim=1)
        choice = torch.where(mask, choice, torch.full_like(choice, -math.inf))
    flipped = (logits.flip(-1), k, scoring, renormalize, None if bias is None else bias.flip(-1), num_groups,
               topk_groups)
    reversed_ids = logits.shape[-1] - 1 - oracle_ids(flipped) if logits.shape[0] else None
    return RoutingView(k, renormalize, scores, choice, slack, cond, reversed_ids)


def call(fn: Any, logits: torch.Tensor, k: int, scoring: str = "softmax", renormalize: bool = True,
         bias: torch.Tensor | None = None, num_groups: int = 1, topk_groups: int = 1) -> torch.Tensor:
    """Run the row on poisoned out_weights / out_ids; return cat(weights, ids) as float64."""
    tokens = logits.shape[0]
    out_w = output_like(torch.empty(0, dtype=torch.float32, device=logits.device), (tokens, k), name="out_weights")
    out_i = output_like(torch.empty(0, dtype=torch.int32, device=logits.device), (tokens, k), name="out_ids")
    result = fn(logits, k, scoring, renormalize, bias, num_groups, topk_groups, out_weights=out_w, out_ids=out_i)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise TypeError(f"moe_topk_gate returns (weights, ids), got {type(result).__name__}")
    weights, ids = result
    return torch.cat([weights.to(torch.float64).flatten(), ids.to(torch.float64).flatten()])


# ------------------------------------------------------------------ bench cases


def _bytes(tokens: int, experts: int, k: int, elem: int, bias: bool) -> int:
    """An ideal gate reads the logits (and the bias) once and writes k weights and ids per token."""
    return tokens * experts * elem + (experts * 4 if bias else 0) + tokens * k * 8


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """DeepSeek-V3's gate for T = max(1, numel // 256) tokens."""
    tokens = max(1, numel // DSV3_EXPERTS)
    logits = torch.empty((tokens, DSV3_EXPERTS), dtype=dtype, device=device).normal_(0.0, 2.0)
    bias = torch.empty(DSV3_EXPERTS, dtype=torch.float32, device=device).normal_(0.0, 0.05)
    return CaseArgs(gate_args(logits, DSV3_K, "sigmoid", True, bias, DSV3_GROUPS, DSV3_TOPK_GROUPS), {},
                    bytes_moved=_bytes(tokens, DSV3_EXPERTS, DSV3_K, logits.element_size(), True))


def bench_mixtral(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """Mixtral's gate (8 experts, softmax, k = 2) for the same T = max(1, numel // 256) tokens."""
    tokens = max(1, numel // DSV3_EXPERTS)
    logits = torch.empty((tokens, MIXTRAL_EXPERTS), dtype=dtype, device=device).normal_(0.0, 2.0)
    return CaseArgs(gate_args(logits, MIXTRAL_K), {},
                    bytes_moved=_bytes(tokens, MIXTRAL_EXPERTS, MIXTRAL_K, logits.element_size(), False))


FORMS = {MIXTRAL_FORM: bench_mixtral}


def form_of(logits: Any = None, k: Any = None, scoring: Any = "softmax", renormalize: Any = True, bias: Any = None,
            num_groups: Any = 1, topk_groups: Any = 1, *rest: Any, **kwargs: Any) -> str | None:
    """Mixtral's form for an ungrouped softmax gate without bias over at most 64 experts; None (DeepSeek-V3's,
    the bench case) otherwise."""
    try:
        small = logits.shape[-1] <= 64
    except (AttributeError, IndexError, TypeError):
        return None
    if scoring == "softmax" and bias is None and num_groups == 1 and small:
        return MIXTRAL_FORM
    return None


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases,
                      compare=RoutingOutput(view=view))
