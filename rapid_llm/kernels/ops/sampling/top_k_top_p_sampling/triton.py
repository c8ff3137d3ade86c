"""Triton top_k_top_p_sampling: the floor's integers without a sort, a block of rows per program.

The floor's rule (rapid_llm.kernels.ops.sampling.top_k_top_p_sampling.native) on the same 2^32 fixed-point
weights, found by threshold searches over the vocabulary in chunks (each weight recomputed from x where a pass
needs it: x is read, never a scratch copy):

1. m, the row's largest value;
2. the k-th weight tau_k: the largest v with #(w >= v) >= k, found 4 bits a pass (16 thresholds at once, 9
   passes; none where no row of the block cuts at k), then W_k = S(tau_k) + (k - #(w > tau_k)) tau_k with
   S(v) the sum of w > v;
3. the nucleus boundary: the smallest v >= tau_k with S(v) < p W_k (float64 compare), 4 bits a pass again,
   tau_f the smallest weight >= it, and how many of tau_f's equal weights (in id order) are kept;
4. one pass in id order: the kept weights' running sum against t = floor(u W_L), u from counter_rng's hash.

Every sum is an integer sum, so the ids are the floor's bit for bit from probabilities; from logits the exp
rounds differently on a GPU (a draw moves only at a boundary). Any strides; CUDA tensors, and CPU tensors under
TRITON_INTERPRET=1.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling.native import OP, check

#: Elements of a program's [rows, tokens] chunk on a GPU (times the 16 thresholds of a search pass), and in the
#: interpreter (fewer, larger numpy ops; the ids do not depend on it).
TILE = 512
INTERPRETER_TILE = 1 << 16
_BIG = tl.constexpr(1 << 40)


@triton.jit
def _weights(x_ptr, rows, row_ok, stride_b, stride_v, v0, vocab, m, t, FROM_LOGITS: tl.constexpr,
             BLOCK_V: tl.constexpr):
    """(w int64 [BLOCK_R, BLOCK_V] of the chunk from token v0, -1 past the vocabulary; the tokens' ids)."""
    col = v0 + tl.arange(0, BLOCK_V).to(tl.int64)
    ok = row_ok[:, None] & (col < vocab)[None, :]
    v = tl.load(x_ptr + rows[:, None] * stride_b + col[None, :] * stride_v, mask=ok, other=0.0).to(tl.float32)
    if FROM_LOGITS:
        v = tl.where(v != v, float("-inf"), v)
        v = tl.minimum(v, 3.4028234663852886e38)
        z = tl.math.div_rn(v - m[:, None], tl.broadcast_to(t[:, None], v.shape))
        e = tl.exp(z)
        e = tl.where((m > float("-inf"))[:, None] & (e == e), e, 0.0)  # -inf / inf is NaN: no weight
    else:
        v = tl.where(v != v, 0.0, v)
        v = tl.minimum(tl.maximum(v, 0.0), 3.4028234663852886e38)
        e = tl.math.div_rn(v, tl.broadcast_to(tl.where(m > 0, m, 1.0)[:, None], v.shape))
    w = tl.floor(e * 4294967296.0).to(tl.int64)
    return tl.where(ok, w, -1), col


@triton.jit
def _sample_kernel(x_ptr, k_ptr, p_ptr, t_ptr, so_ptr, out_ptr, batch, vocab, stride_b, stride_v, stride_k, stride_p,
                   stride_t, stride_o, HAS_K: tl.constexpr, HAS_P: tl.constexpr, HAS_T: tl.constexpr,
                   FROM_LOGITS: tl.constexpr, SINGLE: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_V: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    row_ok = rows < batch
    zero_f = tl.zeros((BLOCK_R,), tl.float32)
    # Step 1: the largest value, and the row's options (k, p, temperature; greedy where T <= 0 or NaN).
    m = zero_f + float("-inf")
    for v0 in range(0, vocab, BLOCK_V):
        col = v0 + tl.arange(0, BLOCK_V).to(tl.int64)
        ok = row_ok[:, None] & (col < vocab)[None, :]
        v = tl.load(x_ptr + rows[:, None] * stride_b + col[None, :] * stride_v, mask=ok, other=float("-inf"))
        v = v.to(tl.float32)
        if FROM_LOGITS:
            v = tl.where(v != v, float("-inf"), v)
        else:
            v = tl.where(v != v, 0.0, tl.maximum(v, 0.0))
        v = tl.where(ok, tl.minimum(v, 3.4028234663852886e38), float("-inf"))
        m = tl.maximum(m, tl.max(v, axis=1))
    t = zero_f + 1.0
    greedy = tl.zeros((BLOCK_R,), tl.int1)
    if HAS_T:
        t = tl.load(t_ptr + rows * stride_t, mask=row_ok, other=1.0)
        greedy = ~(t > 0)
        t = tl.where(greedy, 1.0, t)
    k = tl.zeros((BLOCK_R,), tl.int64) + vocab
    if HAS_K:
        k = tl.load(k_ptr + rows * stride_k, mask=row_ok, other=0).to(tl.int64)
        k = tl.where((k <= 0) | (k >= vocab), vocab, k)
    k = tl.where(greedy, 1, k)
    if SINGLE:  # the vocabulary fits one chunk: its weights computed once, held for every pass
        w1, col1 = _weights(x_ptr, rows, row_ok, stride_b, stride_v, 0, vocab, m, t, FROM_LOGITS, BLOCK_V)

    # Step 2: tau_k, the largest v with #(w >= v) >= k: 9 rounds of 16 thresholds (4 bits of v a round).
    j16 = tl.arange(0, 16).to(tl.int64)
    lo = tl.zeros((BLOCK_R,), tl.int64)
    if tl.sum(((k < vocab) & row_ok).to(tl.int32), axis=0) > 0:
        for r in range(9):
            span = tl.full((), 1, tl.int64) << (32 - 4 * r)
            th = lo[:, None] + j16[None, :] * span
            cnt = tl.zeros((BLOCK_R, 16), tl.int64)
            for v0 in range(0, vocab, BLOCK_V):
                if SINGLE:  # no helper call: a call costs the interpreter milliseconds
                    w, col = w1, col1
                else:
                    w, col = _weights(x_ptr, rows, row_ok, stride_b, stride_v, v0, vocab, m, t, FROM_LOGITS, BLOCK_V)
                cnt += tl.sum((w[:, :, None] >= th[:, None, :]).to(tl.int64), axis=1)
            lo = tl.max(tl.where(cnt >= k[:, None], th, lo[:, None]), axis=1)
    else:
        lo = lo + 4294967296
        for v0 in range(0, vocab, BLOCK_V):
            if SINGLE:  # no helper call: a call costs the interpreter milliseconds
                w, col = w1, col1
            else:
                w, col = _weights(x_ptr, rows, row_ok, stride_b, stride_v, v0, vocab, m, t, FROM_LOGITS, BLOCK_V)
            lo = tl.minimum(lo, tl.min(tl.where(w >= 0, w, 4294967296), axis=1))
    tau_k = lo
    above_k = tl.zeros((BLOCK_R,), tl.int64)
    sum_k = tl.zeros((BLOCK_R,), tl.int64)
    for v0 in range(0, vocab, BLOCK_V):
        if SINGLE:  # no helper call: a call costs the interpreter milliseconds
            w, col = w1, col1
        else:
            w, col = _weights(x_ptr, rows, row_ok, stride_b, stride_v, v0, vocab, m, t, FROM_LOGITS, BLOCK_V)
        gt = w > tau_k[:, None]
        above_k += tl.sum(gt.to(tl.int64), axis=1)
        sum_k += tl.sum(tl.where(gt, w, 0), axis=1)
    ties_k = k - above_k
    w_k = sum_k + ties_k * tau_k

    # Step 3: the nucleus: the smallest v >= tau_k with S(v) < p W_k, then tau_f and its kept equal weights.
    tau_f = tau_k
    n_f = ties_k
    sum_f = sum_k
    if HAS_P:
        p = tl.load(p_ptr + rows * stride_p, mask=row_ok, other=1.0).to(tl.float64)
        p = tl.where(p != p, 1.0, p)
        big = p * w_k.to(tl.float64)
        lo = tau_k - 1  # S(lo) counts as >= p W_k; the answer is in (lo, lo + 2^36], S(2^32) = 0
        for r in range(9):
            span = tl.full((), 1, tl.int64) << (32 - 4 * r)
            th = lo[:, None] + (j16[None, :] + 1) * span
            s = tl.zeros((BLOCK_R, 16), tl.int64)
            for v0 in range(0, vocab, BLOCK_V):
                if SINGLE:  # no helper call: a call costs the interpreter milliseconds
                    w, col = w1, col1
                else:
                    w, col = _weights(x_ptr, rows, row_ok, stride_b, stride_v, v0, vocab, m, t, FROM_LOGITS, BLOCK_V)
                s += tl.sum(tl.where(w[:, :, None] > th[:, None, :], w[:, :, None], 0), axis=1)
            short = ~(s.to(tl.float64) < big[:, None])
            lo = lo + tl.sum(short.to(tl.int64), axis=1) * span
        hi = tl.minimum(lo + 1, 4294967296)
        tau_f = tl.zeros((BLOCK_R,), tl.int64) + _BIG
        for v0 in range(0, vocab, BLOCK_V):
            if SINGLE:  # no helper call: a call costs the interpreter milliseconds
                w, col = w1, col1
            else:
                w, col = _weights(x_ptr, rows, row_ok, stride_b, stride_v, v0, vocab, m, t, FROM_LOGITS, BLOCK_V)
            tau_f = tl.minimum(tau_f, tl.min(tl.where(w >= hi[:, None], w, _BIG), axis=1))
        tau_f = tl.where(tau_f == _BIG, 0, tau_f)
        sum_f = tl.zeros((BLOCK_R,), tl.int64)
        eq_f = tl.zeros((BLOCK_R,), tl.int64)
        for v0 in range(0, vocab, BLOCK_V):
            if SINGLE:  # no helper call: a call costs the interpreter milliseconds
                w, col = w1, col1
            else:
                w, col = _weights(x_ptr, rows, row_ok, stride_b, stride_v, v0, vocab, m, t, FROM_LOGITS, BLOCK_V)
            sum_f += tl.sum(tl.where(w > tau_f[:, None], w, 0), axis=1)
            eq_f += tl.sum((w == tau_f[:, None]).to(tl.int64), axis=1)
        group = tl.where(tau_f == tau_k, ties_k, eq_f)
        safe = tl.where(tau_f > 0, tau_f, 1)
        c = tl.floor((big - sum_f.to(tl.float64)) / safe.to(tl.float64)).to(tl.int64)
        n = c - 2
        for d in range(-2, 2):
            n += ((sum_f + (c + d) * tau_f).to(tl.float64) < big).to(tl.int64)
        n = tl.where(tau_f > 0, n, group)
        n = tl.minimum(tl.maximum(n, 1), group)
        n_f = tl.where(big > 0, n, 1)

    # Step 4: t = floor(u W_L), then the first id in id order where the kept weights' running sum exceeds t.
    seed = tl.load(so_ptr)
    offset = tl.load(so_ptr + 1)
    key = tl.zeros((BLOCK_R,), tl.uint32)
    hs = tl.zeros((BLOCK_R,), tl.uint64)
    for i in tl.static_range(7):  # counter_rng.bits53, the mixer written once (a helper call is slow to interpret)
        if i == 0:
            h = key ^ (seed >> 32).to(tl.uint32) ^ tl.cast(0x85EBCA6B, tl.uint32)
        elif i == 1:
            h = key ^ seed.to(tl.uint32)
        elif i == 2:
            h = key ^ (offset >> 32).to(tl.uint32)
        elif i == 3:
            h = key ^ offset.to(tl.uint32)
        elif i == 4:
            h = key ^ rows.to(tl.uint32)
        elif i == 5:
            h = key ^ tl.cast(0x68E31DA4, tl.uint32)
        else:
            h = key ^ tl.cast(0xB5297A4D, tl.uint32)
        h = h ^ (h >> 16)
        h = h * tl.cast(0x21F0AAAD, tl.uint32)
        h = h ^ (h >> 15)
        h = h * tl.cast(0x735A2D97, tl.uint32)
        h = h ^ (h >> 15)
        if i < 5:
            key = h
        elif i == 5:
            hs = h.to(tl.uint64) << 21
        else:
            hs = hs | (h.to(tl.uint64) >> 11)
    bits = hs.to(tl.int64)
    w_l = sum_f + n_f * tau_f
    u = bits.to(tl.float64) * 1.1102230246251565e-16  # 2^-53
    target = tl.minimum(tl.floor(u * w_l.to(tl.float64)).to(tl.int64), w_l - 1)
    run = tl.zeros((BLOCK_R,), tl.int64)
    seen = tl.zeros((BLOCK_R,), tl.int64)
    found = tl.zeros((BLOCK_R,), tl.int64) + _BIG
    for v0 in range(0, vocab, BLOCK_V):
        if SINGLE:  # no helper call: a call costs the interpreter milliseconds
            w, col = w1, col1
        else:
            w, col = _weights(x_ptr, rows, row_ok, stride_b, stride_v, v0, vocab, m, t, FROM_LOGITS, BLOCK_V)
        eq = (w == tau_f[:, None]).to(tl.int64)
        rank = seen[:, None] + tl.cumsum(eq, axis=1) - eq
        keep = (w > tau_f[:, None]) | ((eq > 0) & (rank < n_f[:, None]))
        acc = run[:, None] + tl.cumsum(tl.where(keep, w, 0), axis=1)
        hit = keep & (acc > target[:, None])
        found = tl.minimum(found, tl.min(tl.where(hit, col[None, :], _BIG), axis=1))
        run = tl.max(acc, axis=1)
        seen += tl.sum(eq, axis=1)
    ids = tl.where((w_l > 0) & (found < _BIG), found, 0)
    tl.store(out_ptr + rows * stride_o, ids, mask=row_ok)


def top_k_top_p_sampling(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None,
                         seed_offset: torch.Tensor, temperature: torch.Tensor | None = None,
                         from_logits: bool = False, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The floor's contract (any strides); this wrapper is the row's launcher and runs the op's checks first."""
    check(x, top_k, top_p, seed_offset, temperature, from_logits, out=out)
    arguments.runs_on(OP, "Triton", ("cuda", "cpu"), x)
    batch, vocab = x.shape
    ids = out if out is not None else torch.empty(batch, dtype=torch.int64, device=x.device)
    if batch == 0:
        return ids
    tile = TILE if x.is_cuda else INTERPRETER_TILE
    block_v = min(triton.next_power_of_2(vocab), tile)
    block_r = max(1, min(triton.next_power_of_2(batch), tile // block_v))
    dummy = ids  # never read where its flag is off
    _sample_kernel[(triton.cdiv(batch, block_r),)](
        x, top_k if top_k is not None else dummy, top_p if top_p is not None else dummy,
        temperature if temperature is not None else dummy, seed_offset, ids, batch, vocab, x.stride(0), x.stride(1),
        top_k.stride(0) if top_k is not None else 0, top_p.stride(0) if top_p is not None else 0,
        temperature.stride(0) if temperature is not None else 0, ids.stride(0),
        HAS_K=top_k is not None, HAS_P=top_p is not None, HAS_T=temperature is not None, FROM_LOGITS=from_logits,
        SINGLE=block_v >= vocab, BLOCK_R=block_r, BLOCK_V=block_v, num_warps=8 if block_v >= 2048 else 4)
    return ids
