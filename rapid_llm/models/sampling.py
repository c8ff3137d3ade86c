"""The decode step's sampler: ``K.top_k_top_p_sampling`` where the op is declared, else a plain-torch stand-in.

The stand-in (:func:`standin_top_k_top_p_sampling`) takes the op's arguments, ``(x, top_k, top_p, seed_offset,
temperature=None, from_logits=False) -> ids``, so swapping one for the other is one name. It keeps the op's
rules where they are cheap to keep (top k first, then the nucleus of mass p on the renormalised top k; k <= 0
or >= vocab keeps every token; a temperature <= 0 is greedy) and its reason for a ``seed_offset`` tensor in
place of a torch.Generator: a tensor read on the device draws anew on each CUDA-graph replay once the caller
advances the offset, and torch.compile does not guard on its value. Its random numbers are a small hash of its
own, not the op's counter_rng: the two draw different tokens for the same seed.
"""
from __future__ import annotations

from typing import Callable

import torch

import rapid_llm.kernels as K

__all__ = ["Sampler", "default_sampler", "standin_top_k_top_p_sampling"]

#: ``(x, top_k, top_p, seed_offset, temperature, from_logits) -> ids [B] int64``.
Sampler = Callable[..., torch.Tensor]
OP = "top_k_top_p_sampling"
_MASK32 = 0xFFFFFFFF


def default_sampler() -> tuple[str, Sampler]:
    """(name, sampler): the declared op ``K.top_k_top_p_sampling``, or the stand-in while the op is not declared."""
    if OP in K.all_ops():
        return f"K.{OP}", getattr(K, OP)
    return "standin_top_k_top_p_sampling (plain torch)", standin_top_k_top_p_sampling


def _uniform(seed_offset: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """One float64 in [0, 1) per row from (seed, offset, row): a multiply-xorshift hash in 32-bit pieces."""
    so = seed_offset.to(torch.int64) & _MASK32  # products below 2^63: int64 never overflows
    h = (so[0] * 0x9E3779B1 + so[1] * 0x85EBCA77 + (rows & _MASK32) * 0xC2B2AE3D) & _MASK32
    for mul in (0x7FEB352D, 0x846CA68B, 0x2C1B3C6D):
        h = h ^ (h >> 16)
        h = (h * mul) & _MASK32
    return (h ^ (h >> 16)).to(torch.float64) * 2.0 ** -32


def standin_top_k_top_p_sampling(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None,
                                 seed_offset: torch.Tensor, temperature: torch.Tensor | None = None,
                                 from_logits: bool = False) -> torch.Tensor:
    """Token ids [B] int64, one per row of x [B, V] (probabilities, or logits / temperature), drawn from the
    row's top k and then its nucleus of mass p; no host sync, fixed shapes (traces whole, captures in a graph)."""
    batch, vocab = x.shape
    v = x.float()
    greedy = torch.zeros(batch, dtype=torch.bool, device=x.device)
    if from_logits:
        if temperature is not None:
            greedy = ~(temperature > 0)
            v = v / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
        v = torch.softmax(v, dim=-1)
    probs, order = torch.sort(v, dim=-1, descending=True, stable=True)
    full = torch.full((batch,), vocab, dtype=torch.int64, device=x.device)
    k = full if top_k is None else top_k.to(torch.int64)
    k = torch.where((k <= 0) | (k >= vocab), full, k)
    k = torch.where(greedy, torch.ones_like(k), k)
    pos = torch.arange(vocab, device=x.device).expand(batch, vocab)
    keep = pos < k[:, None]
    mass = torch.where(keep, probs, torch.zeros_like(probs)).double()
    run = torch.cumsum(mass, dim=-1)
    if top_p is not None:  # the nucleus of the renormalised top k: tokens whose mass before them is below p
        p = torch.nan_to_num(top_p.double(), nan=1.0)[:, None]
        keep = keep & ((pos == 0) | (run - mass < p * run[:, -1:]))
        mass = torch.where(keep, mass, torch.zeros_like(mass))
        run = torch.cumsum(mass, dim=-1)
    target = _uniform(seed_offset, torch.arange(batch, device=x.device))[:, None] * run[:, -1:]
    index = torch.searchsorted(run, target, right=True).clamp(max=vocab - 1)
    return torch.gather(order, 1, index).squeeze(1)
