"""The floor for moe_topk_gate: plain torch, runs on every device and dtype.

A token's router logits [E] become the k experts it is sent to and their weights (DeepSeek-V3's and
Mixtral's gates, vLLM's fused_topk / grouped_topk contract):

    score  = softmax(logits) or sigmoid(logits)          (fp32)
    choice = score + bias                                (bias [E] fp32, DeepSeek-V3's correction; 0 without)
    groups: E split into num_groups groups of E / num_groups; a group's score is the sum of its two best
            choice values; the topk_groups best groups are kept, every other expert is out of the choice
    ids    = the k best choice values among the kept experts, best first
    weights = score[ids] (never the biased value), divided by their sum when renormalize

The tie rule, which every row follows exactly: a higher choice value ranks first; among equal values the
lower expert id wins, and among equal group scores the lower group id. NaN ranks as -inf (below every
finite score; NaN weights stay NaN), and an expert of a dropped group ranks below every kept one. A row whose chosen scores sum to 0 keeps its
zero weights under renormalize (nothing to divide by). torch.topk promises no order among ties, so the
floor ranks with a stable descending sort, which keeps equal values in id order.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.platform import describe

OP = "moe_topk_gate"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SCORINGS = ("softmax", "sigmoid")
#: The largest k and E a row must take (DeepSeek-V3: 256 experts, k = 8).
MAX_K = 8
MAX_EXPERTS = 256


def check(logits: torch.Tensor, k: int, scoring: str = "softmax", renormalize: bool = True,
          bias: torch.Tensor | None = None, num_groups: int = 1, topk_groups: int = 1, *,
          out_weights: torch.Tensor | None = None, out_ids: torch.Tensor | None = None) -> None:
    """moe_topk_gate's argument checks, every path's: shapes, dtypes and the grouping, never the values."""
    a.tensor(OP, "logits", logits)
    a.dtype_in(OP, "logits", logits, DTYPES)
    if logits.dim() != 2:
        raise ValueError(f"{OP}: logits must be [tokens, experts], got {describe(logits)}")
    experts = logits.shape[1]
    if not 1 <= experts <= MAX_EXPERTS:
        raise ValueError(f"{OP}: logits must have 1 to {MAX_EXPERTS} experts, got {experts}")
    a.integer(OP, "k", k, at_least=1)
    if k > MAX_K or k > experts:
        raise ValueError(f"{OP}: k must be at most {MAX_K} and at most the {experts} experts, got {k}")
    if not isinstance(scoring, str):
        raise TypeError(f"{OP}: scoring must be a str, got {a.type_name(scoring)}")
    if scoring not in SCORINGS:
        raise ValueError(f"{OP}: scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    a.boolean(OP, "renormalize", renormalize)
    a.integer(OP, "num_groups", num_groups, at_least=1)
    a.integer(OP, "topk_groups", topk_groups, at_least=1)
    if experts % num_groups:
        raise ValueError(f"{OP}: num_groups must divide the {experts} experts, got {num_groups}")
    if num_groups > 1 and experts // num_groups < 2:
        raise ValueError(f"{OP}: a group's score is the sum of its two best experts, so groups need 2 experts "
                         f"or more; {experts} experts in {num_groups} groups have {experts // num_groups}")
    if topk_groups > num_groups:
        raise ValueError(f"{OP}: topk_groups must be at most num_groups ({num_groups}), got {topk_groups}")
    if k > topk_groups * (experts // num_groups):
        raise ValueError(f"{OP}: k = {k} is more than the {topk_groups * (experts // num_groups)} experts of the "
                         f"{topk_groups} kept groups")
    tensors = {"logits": logits}
    if a.optional_tensor(OP, "bias", bias) is not None:
        if bias.dim() != 1 or bias.shape[0] != experts or bias.dtype != torch.float32:
            raise ValueError(f"{OP}: bias must be [{experts}] fp32 (one per expert), got {describe(bias)}")
        tensors["bias"] = bias
    tokens = logits.shape[0]
    written = {}
    for name, t, dtype, dname in (("out_weights", out_weights, torch.float32, "fp32"),
                                  ("out_ids", out_ids, torch.int32, "int32")):
        if a.optional_tensor(OP, name, t) is not None:
            if tuple(t.shape) != (tokens, k) or t.dtype != dtype:
                raise ValueError(f"{OP}: {name} must be [{tokens}, {k}] {dname}, got {describe(t)}")
            written[name] = t
            tensors[name] = t
    a.one_device(OP, **tensors)
    if written:
        a.no_overlap(OP, written, {"logits": logits, "bias": bias})


def scores_of(logits: torch.Tensor, scoring: str) -> torch.Tensor:
    """The unbiased scores in fp32 (softmax over the experts, or an elementwise sigmoid)."""
    x = logits.float()
    return torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)


def _rank(values: torch.Tensor) -> torch.Tensor:
    """Indices of ``values`` best first along the last dim: NaN as -inf, ties in index order."""
    key = torch.nan_to_num(values, nan=-torch.inf, posinf=torch.inf, neginf=-torch.inf)
    return torch.sort(key, dim=-1, descending=True, stable=True).indices


def choose(scores: torch.Tensor, k: int, bias: torch.Tensor | None, num_groups: int,
           topk_groups: int) -> torch.Tensor:
    """The k chosen experts per token (int64, best first) under the tie rule, from fp32 scores."""
    choice = scores if bias is None else scores + bias
    if num_groups > 1:
        tokens, experts = choice.shape
        grouped = choice.view(tokens, num_groups, experts // num_groups)
        best2 = torch.gather(grouped, -1, _rank(grouped)[..., :2])
        group_score = best2[..., 0] + best2[..., 1]
        kept = _rank(group_score)[:, :topk_groups]
        keep = torch.zeros(tokens, num_groups, dtype=torch.bool, device=choice.device).scatter_(1, kept, True)
        dropped = (~keep).repeat_interleave(experts // num_groups, dim=1)
        # The kept experts first, each part in id order; ranked by choice value from there, a stable sort keeps a
        # kept expert at -inf (or NaN) ahead of every expert of a dropped group.
        order = torch.sort(dropped.to(torch.uint8), dim=-1, stable=True).indices
        key = torch.where(dropped, torch.full_like(choice, -torch.inf), choice)
        ranked = torch.gather(order, -1, _rank(torch.gather(key, -1, order)))
        return ranked[:, :k]
    return _rank(choice)[:, :k]


def weights_of(scores: torch.Tensor, ids: torch.Tensor, renormalize: bool) -> torch.Tensor:
    """The chosen experts' unbiased scores, divided by their sum when renormalize (a zero sum left as is)."""
    w = torch.gather(scores, -1, ids)
    if renormalize:
        s = w.sum(dim=-1, keepdim=True)
        w = torch.where(s > 0, w / torch.where(s > 0, s, torch.ones_like(s)), w)
    return w


def moe_topk_gate(logits: torch.Tensor, k: int, scoring: str = "softmax", renormalize: bool = True,
                  bias: torch.Tensor | None = None, num_groups: int = 1, topk_groups: int = 1, *,
                  out_weights: torch.Tensor | None = None,
                  out_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [T, k] fp32, ids [T, k] int32): each token's k experts, best first, under the tie rule of the
    module docstring; into out_weights / out_ids where given."""
    check(logits, k, scoring, renormalize, bias, num_groups, topk_groups, out_weights=out_weights, out_ids=out_ids)
    scores = scores_of(logits, scoring)
    ids = choose(scores, k, bias, num_groups, topk_groups)
    weights = weights_of(scores, ids, renormalize)
    if out_weights is not None:
        weights = out_weights.copy_(weights)
    if out_ids is not None:
        ids = out_ids.copy_(ids)
    return weights, ids.to(torch.int32)


moe_topk_gate.check = check
