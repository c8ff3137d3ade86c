"""moe_topk_gate rows with one known defect each, for the routing mode to name (tests/ops/test_moe_topk_gate.py).

- ``gate_higher_id_wins``: among equal choice values the higher expert id wins (a descending sort of
  (score, id) pairs, as a gate keyed on score * E + id would do): the op's tie rule broken the other way.
- ``gate_drops_renormalisation``: the chosen experts' scores returned as they are when renormalize asks
  for them to sum to 1.
- ``gate_higher_id_wins_triton``: the first defect in a Triton kernel (the pick of the highest index
  holding the max), run in the interpreter on CPU.

Each is the floor's contract otherwise (rapid_llm.kernels.ops.moe.moe_topk_gate.native).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops.moe.moe_topk_gate import native


def _outputs(weights: torch.Tensor, ids: torch.Tensor, out_weights: torch.Tensor | None,
             out_ids: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if out_weights is not None:
        weights = out_weights.copy_(weights)
    if out_ids is not None:
        ids = out_ids.copy_(ids)
    return weights, ids.to(torch.int32)


def gate_higher_id_wins(logits, k, scoring="softmax", renormalize=True, bias=None, num_groups=1, topk_groups=1, *,
                        out_weights=None, out_ids=None):
    """The floor with every ranking reversed among equal values: the higher expert (and group) id first."""
    native.check(logits, k, scoring, renormalize, bias, num_groups, topk_groups, out_weights=out_weights,
                 out_ids=out_ids)
    scores = native.scores_of(logits, scoring)
    # Ranked on the experts in reverse order (groups reversed with them), then mapped back: the floor's
    # stable sort now keeps the higher id first among equal values.
    flipped = native.choose(scores.flip(-1), k, None if bias is None else bias.flip(-1), num_groups, topk_groups)
    ids = scores.shape[-1] - 1 - flipped
    return _outputs(native.weights_of(scores, ids, renormalize), ids, out_weights, out_ids)


def gate_drops_renormalisation(logits, k, scoring="softmax", renormalize=True, bias=None, num_groups=1,
                               topk_groups=1, *, out_weights=None, out_ids=None):
    """The floor's choice, its weights never divided by their sum."""
    native.check(logits, k, scoring, renormalize, bias, num_groups, topk_groups, out_weights=out_weights,
                 out_ids=out_ids)
    scores = native.scores_of(logits, scoring)
    ids = native.choose(scores, k, bias, num_groups, topk_groups)
    return _outputs(native.weights_of(scores, ids, False), ids, out_weights, out_ids)


@triton.jit
def _higher_id_kernel(logits_ptr, w_ptr, ids_ptr, experts, K: tl.constexpr, BLOCK_E: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK_E)
    ok = col < experts
    x = tl.load(logits_ptr + t * experts + col, mask=ok, other=float("-inf")).to(tl.float32)
    e = tl.where(ok, tl.exp(x - tl.max(x, axis=0)), 0.0)
    score = e / tl.sum(e, axis=0)
    key = tl.where(ok, tl.where(score != score, -0.5, score), -1.0)  # NaN below every score, above padding
    total = 0.0
    for j in tl.static_range(K):
        best = tl.max(key, axis=0)
        at = tl.max(tl.where(key == best, col, -1), axis=0)  # the defect: the highest index holding the max
        w = tl.sum(tl.where(col == at, score, 0.0), axis=0)
        key = tl.where(col == at, -2.0, key)
        tl.store(w_ptr + t * K + j, w)
        tl.store(ids_ptr + t * K + j, at)
        total += w
    for j in tl.static_range(K):
        w = tl.load(w_ptr + t * K + j)
        tl.store(w_ptr + t * K + j, w / total)


def gate_higher_id_wins_triton(logits, k, scoring="softmax", renormalize=True, bias=None, num_groups=1,
                               topk_groups=1, *, out_weights=None, out_ids=None):
    """The kernel for softmax, renormalised, ungrouped calls without bias; the same defect in plain torch for
    the rest (verify's cases cover every option, and a crash would hide the defect's name)."""
    native.check(logits, k, scoring, renormalize, bias, num_groups, topk_groups, out_weights=out_weights,
                 out_ids=out_ids)
    if scoring != "softmax" or not renormalize or bias is not None or num_groups != 1:
        return gate_higher_id_wins(logits, k, scoring, renormalize, bias, num_groups, topk_groups,
                                   out_weights=out_weights, out_ids=out_ids)
    tokens, experts = logits.shape
    logits = logits.contiguous()
    weights = out_weights if out_weights is not None else torch.empty(tokens, k, device=logits.device)
    ids = out_ids if out_ids is not None else torch.empty(tokens, k, dtype=torch.int32, device=logits.device)
    if tokens:
        _higher_id_kernel[(tokens,)](logits, weights, ids, experts, K=k, BLOCK_E=triton.next_power_of_2(experts))
    return weights, ids
