"""top_k_top_p_sampling rows with one known defect each, for the sampling mode to name
(tests/ops/test_top_k_top_p_sampling.py).

- ``sampling_nucleus_off_by_one``: the nucleus test takes the running sum with the token itself (inclusive
  cumsum), so the token that crosses p is dropped: the nucleus cut one token early.
- ``sampling_p_before_k``: top-p applied to the whole distribution, then top-k: the nucleus is measured on the
  wrong mass.
- ``sampling_ignores_temperature``: the logits' temperature never applied (and a temperature <= 0 not greedy).
- ``sampling_fixed``: their honest twin, the floor's own steps.

Each is the floor's contract otherwise (rapid_llm.kernels.ops.sampling.top_k_top_p_sampling.native): the same
weights, draw and random numbers.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling import counter_rng, native


def _kept(w: torch.Tensor, k: torch.Tensor, top_p: torch.Tensor | None, *, inclusive: bool = False,
          p_first: bool = False) -> torch.Tensor:
    batch, vocab = w.shape
    order = torch.sort(w, dim=1, descending=True, stable=True).indices
    ws = torch.gather(w, 1, order)
    incl = torch.cumsum(ws, dim=1)
    pos = torch.arange(vocab, device=w.device).expand(batch, vocab)
    keep = pos < k[:, None]
    if top_p is not None:
        mass = incl[:, -1:] if p_first else torch.gather(incl, 1, (k - 1)[:, None])
        run = incl if inclusive else incl - ws  # the defect: the running sum with the token itself
        p = torch.nan_to_num(top_p.to(torch.float64), nan=1.0)[:, None]
        keep = keep & ((pos == 0) | (run.to(torch.float64) < p * mass.to(torch.float64)))
    return torch.zeros_like(keep).scatter_(1, order, keep)


def _sample(x, top_k, top_p, seed_offset, temperature, from_logits, out, *, inclusive=False, p_first=False,
            drop_temperature=False):
    native.check(x, top_k, top_p, seed_offset, temperature, from_logits, out=out)
    batch, vocab = x.shape
    w, greedy = native.weights(x, None if drop_temperature else temperature, from_logits)
    keep = _kept(w, native.effective_k(top_k, greedy, vocab), top_p, inclusive=inclusive, p_first=p_first)
    ids = native.draw(w, keep, counter_rng.bits53(seed_offset, torch.arange(batch, device=x.device)))
    return ids if out is None else out.copy_(ids)


def sampling_nucleus_off_by_one(x, top_k, top_p, seed_offset, temperature=None, from_logits=False, *, out=None):
    """The floor with an inclusive running sum in the nucleus test."""
    return _sample(x, top_k, top_p, seed_offset, temperature, from_logits, out, inclusive=True)


def sampling_p_before_k(x, top_k, top_p, seed_offset, temperature=None, from_logits=False, *, out=None):
    """The floor with p measured on the whole distribution's mass, before the top-k cut."""
    return _sample(x, top_k, top_p, seed_offset, temperature, from_logits, out, p_first=True)


def sampling_ignores_temperature(x, top_k, top_p, seed_offset, temperature=None, from_logits=False, *, out=None):
    """The floor with the logits taken at temperature 1."""
    return _sample(x, top_k, top_p, seed_offset, temperature, from_logits, out, drop_temperature=True)


def sampling_fixed(x, top_k, top_p, seed_offset, temperature=None, from_logits=False, *, out=None):
    """The honest twin: the floor's steps."""
    return _sample(x, top_k, top_p, seed_offset, temperature, from_logits, out)
