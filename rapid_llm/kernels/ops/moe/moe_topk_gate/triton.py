"""Triton moe_topk_gate: a token per program at a GPU's decode sizes, a block of tokens per program beyond (and in
the CPU interpreter), every expert of a token in registers.

The floor's contract and tie rule (rapid_llm.kernels.ops.moe.moe_topk_gate.native): fp32 scores by softmax or
sigmoid, the choice on score + bias, grouped top-k (a group's score the sum of its two best choice values;
the topk_groups best groups kept, equal group scores to the lower group id), k experts best first, equal
choice values to the lower expert id, NaN as -inf, weights the unbiased scores (renormalised when asked).
Each of the k picks is a max, then the lowest index holding it, over a [tokens, experts] tile: no sort, no
order left to the hardware. Groups are one [tokens, groups, experts of a group] view where E fills the tile
and the groups are a power of two (DeepSeek-V3's 256 in 8), else a loop over the groups. Every option is served (softmax and sigmoid, bias, groups, renormalize), any
strides. Runs on CUDA tensors, and on CPU tensors under TRITON_INTERPRET=1.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.moe.moe_topk_gate.native import OP, check

#: Elements of a program's [tokens, experts] tile.
TILE = 4096
#: Up to this many tokens on a GPU each program takes one: a program's time is its dependent chain (k picks of
#: reductions over its tile), and 16 tokens of DeepSeek-V3's 256 experts in one program made it 14.9 us on an H100
#: where one token took 8.8 (T = 16 against T = 1, cold L2); up to 128 programs are one per SM of an H100 / H200
#: (132). The CPU interpreter keeps the blocks: its cost is per program (3x the time of the rows' CPU checks).
ONE_TOKEN_PROGRAMS = 128


def tokens_per_program(tokens: int, block_e: int, on_gpu: bool) -> int:
    """BLOCK_T: one token per program for a GPU's decode sizes, else as many as fill the TILE."""
    if on_gpu and tokens <= ONE_TOKEN_PROGRAMS:
        return 1
    return max(1, min(triton.next_power_of_2(tokens), TILE // block_e))


@triton.jit
def _gate_kernel(logits_ptr, bias_ptr, w_ptr, ids_ptr, tokens, experts, stride_lt, stride_le, stride_wt, stride_wk,
                 stride_it, stride_ik, K: tl.constexpr, SIGMOID: tl.constexpr, RENORMALIZE: tl.constexpr,
                 HAS_BIAS: tl.constexpr, GROUPS: tl.constexpr, TOPK_GROUPS: tl.constexpr, DENSE_GROUPS: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)
    col = tl.arange(0, BLOCK_E)
    t_ok = t < tokens
    e_ok = col < experts
    mask = t_ok[:, None] & e_ok[None, :]
    x = tl.load(logits_ptr + t[:, None] * stride_lt + col[None, :].to(tl.int64) * stride_le, mask=mask,
                other=float("-inf")).to(tl.float32)
    if SIGMOID:
        score = tl.math.div_rn(tl.full(x.shape, 1.0, tl.float32), 1.0 + tl.exp(-x))
    else:
        m = tl.max(x, axis=1)
        e = tl.exp(x - m[:, None])
        e = tl.where(e_ok[None, :], e, 0.0)
        s = tl.sum(e, axis=1)
        score = tl.math.div_rn(e, tl.broadcast_to(s[:, None], e.shape))
    choice = score
    if HAS_BIAS:
        b = tl.load(bias_ptr + col, mask=e_ok, other=0.0)
        choice = score + b[None, :]
    key = tl.where(choice != choice, float("-inf"), choice)
    # Tier: 0 a kept expert, 1 one of a dropped group, 2 a padding column: a lower tier always ranks first.
    tier = tl.where(e_ok[None, :], 0, 2) + tl.zeros(x.shape, tl.int32)
    if GROUPS > 1 and DENSE_GROUPS:
        # E fills the tile and the groups are a power of two: [tokens, groups, experts of a group] in one view.
        S: tl.constexpr = BLOCK_E // GROUPS
        g3 = tl.reshape(key, (BLOCK_T, GROUPS, S))
        c3 = tl.arange(0, S)
        top1 = tl.max(g3, axis=2)
        at1 = tl.min(tl.where(g3 == top1[:, :, None], c3[None, None, :], S), axis=2)
        top2 = tl.max(tl.where(c3[None, None, :] == at1[:, :, None], float("-inf"), g3), axis=2)
        gscore = top1 + top2
        gscore = tl.where(gscore != gscore, float("-inf"), gscore)
        gi = tl.arange(0, GROUPS)
        better = (gscore[:, None, :] > gscore[:, :, None]) | \
            ((gscore[:, None, :] == gscore[:, :, None]) & (gi[None, None, :] < gi[None, :, None]))
        rank = tl.sum(better.to(tl.int32), axis=2)
        dropped3 = tl.where(rank >= TOPK_GROUPS, 1, 0)[:, :, None] + tl.zeros((BLOCK_T, GROUPS, S), tl.int32)
        tier = tl.maximum(tier, tl.reshape(dropped3, (BLOCK_T, BLOCK_E)))
    elif GROUPS > 1:
        size = experts // GROUPS
        grp = col // size
        gcol = tl.arange(0, BLOCK_G)
        gscore = tl.full((BLOCK_T, BLOCK_G), float("-inf"), tl.float32)
        for g in tl.static_range(GROUPS):
            in_g = (grp == g)[None, :] & e_ok[None, :]
            top1 = tl.max(tl.where(in_g, key, float("-inf")), axis=1)
            at1 = tl.min(tl.where(in_g & (key == top1[:, None]), col[None, :], BLOCK_E), axis=1)
            top2 = tl.max(tl.where(in_g & (col[None, :] != at1[:, None]), key, float("-inf")), axis=1)
            both = top1 + top2
            both = tl.where(both != both, float("-inf"), both)
            gscore = tl.where((gcol == g)[None, :], both[:, None], gscore)
        for g in tl.static_range(GROUPS):
            mine = tl.max(tl.where((gcol == g)[None, :], gscore, float("-inf")), axis=1)
            better = (gscore > mine[:, None]) | ((gscore == mine[:, None]) & (gcol < g)[None, :])
            rank = tl.sum((better & (gcol < GROUPS)[None, :]).to(tl.int32), axis=1)
            dropped = rank >= TOPK_GROUPS
            tier = tl.where(((grp == g) & e_ok)[None, :] & dropped[:, None], 1, tier)
    kcol = tl.arange(0, BLOCK_K)
    wk = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    ik = tl.zeros((BLOCK_T, BLOCK_K), tl.int32)
    taken = tl.zeros(x.shape, tl.int1)
    for j in tl.static_range(K):
        t_here = tl.where(taken, 3, tier)
        best_tier = tl.min(t_here, axis=1)
        cand = t_here == best_tier[:, None]
        best = tl.max(tl.where(cand, key, float("-inf")), axis=1)
        at = tl.min(tl.where(cand & (key == best[:, None]), col[None, :], BLOCK_E), axis=1)
        hit = col[None, :] == at[:, None]
        taken = taken | hit
        w = tl.sum(tl.where(hit, score, 0.0), axis=1)
        wk = tl.where((kcol == j)[None, :], w[:, None], wk)
        ik = tl.where((kcol == j)[None, :], at[:, None], ik)
    if RENORMALIZE:
        s = tl.sum(wk, axis=1)
        pos = s > 0
        wk = tl.where(pos[:, None], tl.math.div_rn(wk, tl.broadcast_to(tl.where(pos, s, 1.0)[:, None], wk.shape)),
                      wk)
    k_ok = t_ok[:, None] & (kcol < K)[None, :]
    tl.store(w_ptr + t[:, None] * stride_wt + kcol[None, :].to(tl.int64) * stride_wk, wk, mask=k_ok)
    tl.store(ids_ptr + t[:, None] * stride_it + kcol[None, :].to(tl.int64) * stride_ik, ik, mask=k_ok)


def moe_topk_gate(logits: torch.Tensor, k: int, scoring: str = "softmax", renormalize: bool = True,
                  bias: torch.Tensor | None = None, num_groups: int = 1, topk_groups: int = 1, *,
                  out_weights: torch.Tensor | None = None,
                  out_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The floor's contract (any strides); this wrapper is the row's launcher and runs the op's checks first."""
    check(logits, k, scoring, renormalize, bias, num_groups, topk_groups, out_weights=out_weights, out_ids=out_ids)
    arguments.runs_on(OP, "Triton", ("cuda", "cpu"), logits)
    tokens, experts = logits.shape
    weights = out_weights if out_weights is not None else torch.empty((tokens, k), dtype=torch.float32,
                                                                      device=logits.device)
    ids = out_ids if out_ids is not None else torch.empty((tokens, k), dtype=torch.int32, device=logits.device)
    if tokens == 0:
        return weights, ids
    block_e = triton.next_power_of_2(experts)
    block_t = tokens_per_program(tokens, block_e, logits.is_cuda)
    bias_arg = bias if bias is not None else weights  # never read without HAS_BIAS
    _gate_kernel[(triton.cdiv(tokens, block_t),)](
        logits, bias_arg, weights, ids, tokens, experts, logits.stride(0), logits.stride(1), weights.stride(0),
        weights.stride(1), ids.stride(0), ids.stride(1), K=k, SIGMOID=scoring == "sigmoid",
        RENORMALIZE=renormalize, HAS_BIAS=bias is not None, GROUPS=num_groups, TOPK_GROUPS=topk_groups,
        DENSE_GROUPS=block_e == experts and num_groups & (num_groups - 1) == 0,
        BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_G=triton.next_power_of_2(num_groups),
        BLOCK_K=triton.next_power_of_2(k), num_warps=4)
    return weights, ids
