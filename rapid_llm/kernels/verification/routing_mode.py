"""The routing comparison rule: exact integer ids under a stated tie rule, float weights, renormalised rows.

A mixture-of-experts gate (``moe_topk_gate``) returns, per token, the ids of the k experts it routes to and
their weights. The default per-element rule cannot judge that: an id is right or wrong, never "close", and a
swapped pair of ids is a different routing even when every weight is within tolerance. The contract:

- **ids** equal the float64 oracle's position for position, under the op's tie rule (a higher choice score
  first; among equal scores the lower expert id, among equal group scores the lower group id). A row whose
  ids differ only where the oracle's scores are exactly equal broke a tie the other way:
  ``tie_broken_differently``, and so is a row equal to the oracle's ids under the tie rule reversed (a
  tie between groups changes every id after it). Any other difference is ``wrong_experts`` (an id outside [0, E), an expert
  twice, or one whose score is not the oracle's). Where two scores differ by less than an fp32 row can
  resolve (the rounding of the score and its bias, which the op's ``view`` states per expert), either
  order is accepted and counted: the oracle in float64 sees an order fp32 cannot promise. Such a row may
  shift its later ids onto exact ties (scores that underflow to 0 in float64 and fp32 alike), so a row is
  ``tie_broken_differently`` only where every difference is an exact tie.
- **weights** are compared with the oracle's weights of the experts the row chose (so an accepted near
  tie is judged on its own expert's weight): ``ulps`` fp32 ulps of |exact| times the exponent's size
  (1 + |z|, z the argument of exp in the score: exp's rounding grows with it), plus fp32's tiny.
- **renormalised rows** (``renormalize``) sum to 1 within 2 (k + 2) fp32 ulps (times the same factor); a
  row further off is ``not_renormalised``, and its weights must then be the oracle's exactly to pass.

The op gives ``view(*args)``: a :class:`RoutingView` of a case, from its float64 arguments' values. The
result a row's ``call`` returns is its weights then its ids, float64, flattened and concatenated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, MutableMapping, NamedTuple

import torch

from rapid_llm.kernels.verification.compare_modes import CaseErrors, exact_agreement

__all__ = ["RoutingView", "RoutingOutput", "CLASSES"]

#: The defect classes the mode names, in the order the summary gives them.
CLASSES = ("wrong_experts", "tie_broken_differently", "not_renormalised")
_EPS32 = torch.finfo(torch.float32).eps
_TINY32 = torch.finfo(torch.float32).tiny
_FIRST = "first "


class RoutingView(NamedTuple):
    """What the rule needs to know of one case, in float64 ([T, E] each).

    ``scores``: the unbiased scores the weights are made of; ``choice``: what the experts are ranked by
    (score + bias; experts of groups out of the choice at -inf; NaN as -inf); ``slack``: per expert, how far
    an fp32 row's choice value may be from the exact one; ``cond``: the weights' error factor (1 + |z|);
    ``reversed_ids`` [T, k]: the oracle's ids under the tie rule reversed (the higher expert and group id
    first), or None: a row equal to them broke its ties the other way, group ties included.
    """

    k: int
    renormalize: bool
    scores: torch.Tensor
    choice: torch.Tensor
    slack: torch.Tensor
    cond: torch.Tensor
    reversed_ids: torch.Tensor | None = None


@dataclass(frozen=True)
class RoutingOutput:
    """Ids exact under the tie rule, weights within ``ulps`` fp32 ulps, renormalised rows summing to 1."""

    view: Callable[..., RoutingView]
    ulps: float = 8.0

    @property
    def rule(self) -> str:
        return ("routing: ids the oracle's position for position under the tie rule (higher score first; the "
                "lower expert id among equal scores, the lower group id among equal group scores; a near tie "
                "within fp32 rounding either way); weights |diff| <= "
                f"{self.ulps:g} fp32 ulps x (1 + |z|) x |exact| + tiny, of the experts the row chose; renormalised "
                "rows sum to 1 within 2 (k + 2) fp32 ulps x (1 + |z|)")

    def errors(self, got: torch.Tensor, exact: torch.Tensor, args: tuple,
               counts: MutableMapping[str, int]) -> CaseErrors:
        v = self.view(*args)
        tokens, experts = v.scores.shape
        k, n = v.k, v.scores.shape[0] * v.k
        if got.numel() != 2 * n or exact.numel() != 2 * n:
            raise ValueError(f"routing: the result has {got.numel()} elements, [{tokens}, {k}] weights and ids "
                             f"{2 * n}")
        dev = exact.device
        scores, choice, slack, cond = (t.to(dev, torch.float64) for t in (v.scores, v.choice, v.slack, v.cond))
        gw, gi = got[:n].reshape(tokens, k).to(dev), got[n:].reshape(tokens, k).to(dev)
        ew, ei = exact[:n].reshape(tokens, k), exact[n:].reshape(tokens, k)
        valid = torch.isfinite(gi) & (gi == gi.round()) & (gi >= 0) & (gi < experts)
        g = torch.where(valid, gi, torch.zeros_like(gi)).long()
        e = ei.long()
        gs, es = choice.gather(1, g), choice.gather(1, e)
        near_by = torch.maximum(slack.gather(1, g), slack.gather(1, e))
        differ = gi != ei
        tie_pos = differ & valid & (gs == es)
        near_pos = differ & valid & ~tie_pos & ((gs - es).abs() <= near_by)
        srt = torch.sort(g, dim=1).values
        dup = (srt[:, 1:] == srt[:, :-1]).any(1) if k > 1 else torch.zeros(tokens, dtype=torch.bool, device=dev)
        wrong_row = (differ & ~tie_pos & ~near_pos).any(1) | dup | (~valid).any(1)
        reversed_rule = torch.zeros(tokens, dtype=torch.bool, device=dev)
        if v.reversed_ids is not None:  # a tie between groups changes every id after it: compare the whole row
            reversed_rule = differ.any(1) & (gi == v.reversed_ids.to(dev, torch.float64)).all(1)
            wrong_row = wrong_row & ~reversed_rule
            tie_pos = tie_pos | (differ & reversed_rule.unsqueeze(1))
            near_pos = near_pos & ~reversed_rule.unsqueeze(1)
        # A row that resolved a near tie the other way shifts the ids after it, and those may land on exact ties
        # (scores that underflowed to 0 in both): only a row whose every difference is an exact tie broke one.
        near_row = ~wrong_row & near_pos.any(1)
        tie_row = ~wrong_row & ~near_row & tie_pos.any(1)

        # Weights: the oracle's for the experts the row chose (an accepted near tie has its own expert's weight).
        mine = scores.gather(1, g)
        factor = cond.gather(1, g).amax(1, keepdim=True) if k else torch.ones(tokens, 1, device=dev)
        if v.renormalize:
            s = mine.sum(1, keepdim=True)
            mine = torch.where(s > 0, mine / torch.where(s > 0, s, torch.ones_like(s)), mine)
        ref_w = torch.where(wrong_row.unsqueeze(1), ew, mine)
        w_diff = exact_agreement(gw, ref_w)
        w_allowed = self.ulps * _EPS32 * factor * ref_w.abs().nan_to_num(posinf=0.0) + _TINY32
        off = torch.zeros(tokens, dtype=torch.bool, device=dev)
        if v.renormalize:
            ref_sum, got_sum = ref_w.sum(1), gw.sum(1)
            ones = (ref_sum - 1).abs() < 1e-9
            within = (got_sum - 1).abs() <= 2 * (k + 2) * _EPS32 * factor.squeeze(1)
            off = ones & ~within
            w_allowed = torch.where(off.unsqueeze(1), torch.zeros_like(w_allowed), w_allowed)

        bad_ids = differ & (wrong_row | tie_row).unsqueeze(1)
        id_gap = (gi - ei).abs().nan_to_num(nan=math.inf).clamp_min(1.0)
        i_diff = torch.where(bad_ids, id_gap, torch.zeros_like(gi))
        diff = torch.cat([w_diff.flatten(), i_diff.flatten()])
        allowed = torch.cat([w_allowed.flatten(), torch.zeros(n, dtype=torch.float64, device=dev)])
        scale = torch.cat([ref_w.abs().flatten(), ei.abs().clamp_min(1.0).flatten()])

        counts["rows"] = counts.get("rows", 0) + tokens
        if v.renormalize:
            counts["renormalised rows"] = counts.get("renormalised rows", 0) + tokens
        for name, rows in (("wrong_experts", wrong_row), ("tie_broken_differently", tie_row),
                           ("not_renormalised", off), ("near ties", near_row)):
            counts[name] = counts.get(name, 0) + int(rows.sum())
            if name in CLASSES and bool(rows.any()) and not any(key.startswith(_FIRST + name) for key in counts):
                r = int(rows.nonzero()[0, 0])
                said = (f"sum {float(gw[r].sum()):.9g}" if name == "not_renormalised" else
                        f"ids {_ints(gi[r])} for the oracle's {_ints(ei[r])}")
                counts[f"{_FIRST}{name}: [T={tokens}, E={experts}, k={k}] row {r}, {said}"] = 1
        return CaseErrors(diff, allowed, scale)

    def defects(self, got: torch.Tensor, exact: torch.Tensor, args: tuple) -> list[tuple[str, str]]:
        """The classes of a failing case, each a defect kind verify puts in the verdict (with its first row)."""
        counts: dict[str, int] = {}
        self.errors(got, exact, args, counts)
        found = []
        for name in CLASSES:
            if counts.get(name, 0):
                first = next((key.removeprefix(_FIRST) for key in counts if key.startswith(_FIRST + name)), name)
                rows = counts["renormalised rows"] if name == "not_renormalised" else counts["rows"]
                found.append((name, f"{counts[name]} of {rows} rows; first {first.removeprefix(name + ': ')}"))
        return found

    def summary(self, counts: Mapping[str, int]) -> tuple[str, ...]:
        rows = counts.get("rows", 0)
        differ = counts.get("wrong_experts", 0) + counts.get("tie_broken_differently", 0)
        lines = [f"routing: ids of {differ} of {rows} rows differ from the oracle's (wrong_experts "
                 f"{counts.get('wrong_experts', 0)}, tie_broken_differently {counts.get('tie_broken_differently', 0)})"
                 f"; {counts.get('near ties', 0)} rows resolved a near tie (scores within fp32 rounding) the other "
                 "way, allowed"]
        if counts.get("renormalised rows", 0):
            lines.append(f"routing: not_renormalised {counts.get('not_renormalised', 0)} of "
                         f"{counts['renormalised rows']} renormalised rows")
        lines += [f"routing: {key.removeprefix(_FIRST)}" for key in counts if key.startswith(_FIRST)]
        return tuple(lines)


def _ints(row: torch.Tensor) -> list:
    return [int(x) if math.isfinite(x) else x for x in row.tolist()]
