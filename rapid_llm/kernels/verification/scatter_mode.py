"""The comparison rule for a scatter into persistent state: which slots a row may change, and nothing else.

An op such as ``reshape_and_cache_flash`` writes some rows of a large tensor it is handed (a paged KV cache:
token t's key lands in slot ``slot_mapping[t]``, -1 meaning padding) and must leave every other byte as it
was. A plain comparison with an oracle cannot say why a result is wrong, and a tolerance has no meaning for
bytes that must not move. So this mode judges each written tensor in two parts:

- **the written slots** (rows named by the slot mapping): as the float64 oracle has them. A copy is bit for
  bit (any difference fails, NaN for NaN); an fp8 row within ``fp8_ulps`` (default 1) float8_e4m3fn steps of
  the oracle's exact rounding (compare_modes.e4m3_ulps: a row dividing in fp32 rounds twice), and the report
  counts the values a step off;
- **every other element**: bit for bit what it held before the call (the ``before`` tensor the row was
  given a copy of), with no allowance at all. The bytes around and between a tensor's elements are the guard
  bands' (rapid_llm.kernels.verification.defects).

A changed slot is named, not only counted: ``wrote_padding`` when it holds the row a padded token (slot -1)
would have written (-1 read as a Python index lands on the last slot, read as unsigned or clamped on slot 0),
``wrote_outside_slots`` for any other change to a slot the mapping does not name (with the count and the
first such slot, as block and offset). ``verify`` asks :meth:`ScatterWrite.defects` for these on a case that
fails, so they appear in the verdict as defect kinds.

An op opts in with ``Reference(compare=ScatterWrite(targets=...))``: ``targets(*args)`` (the arguments as the
row got them, the written tensors as they were before the call) lists a :class:`ScatterTarget` per written
tensor, in the order its ``call`` concatenates them (each flattened, as float64), the oracle the same.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, MutableMapping, NamedTuple, Sequence

import torch

from rapid_llm.kernels.verification.compare_modes import CaseErrors, _allowed_for_ulps, e4m3_ulps, exact_agreement

__all__ = ["ScatterTarget", "ScatterWrite", "SCATTER_DEFECTS"]

#: The defect kinds this mode names (rapid_llm.kernels.verification.defects.DEFECT_KINDS holds them too).
SCATTER_DEFECTS = ("wrote_outside_slots", "wrote_padding")
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
#: Bad rows compared with every padded token's row, at most (a row that writes everywhere is named by its first).
_MATCH_ROWS = 2048


@dataclass(frozen=True)
class ScatterTarget:
    """One written tensor: its name, its value before the call (its own dtype and layout), the slot each source
    row goes to (int64 [T], -1 padding; a slot is a row of the tensor viewed as [slots, row]), what each source
    row becomes there (float64 [T, row], padded tokens' rows included), and whether that is an fp8 rounding
    (judged in fp8 steps) or a copy (bit for bit). ``block_size`` names slots as (block, offset) in messages."""

    name: str
    before: torch.Tensor
    slots: torch.Tensor
    rows: torch.Tensor
    fp8: bool = False
    block_size: int | None = None

    def where(self, slot: int) -> str:
        """``slot 57 (block 3, offset 9)``."""
        if not self.block_size:
            return f"slot {slot}"
        return f"slot {slot} (block {slot // self.block_size}, offset {slot % self.block_size})"


class _Judged(NamedTuple):
    """One target judged: per element diff / allowed, and per slot what went wrong."""

    diff: torch.Tensor
    allowed: torch.Tensor
    written: int               # slots the mapping names
    wrong_written: int         # bad elements in them (padding aside)
    one_step: int              # fp8 values one step from the exact rounding
    outside: torch.Tensor      # slots outside the mapping that changed (not holding a padded row), ascending
    outside_elements: int
    padded: list[tuple[int, int]]  # (slot, padded token) for slots holding a padded token's row
    padded_elements: int


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT_OF_SIZE[t.element_size()])


def _changed(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """|got - want| where their bits differ (at least the smallest float64, so a sign of zero counts), else 0."""
    d = exact_agreement(got, want)
    return torch.where(d > 0, d, torch.full_like(d, 5e-324))


def _judge(t: ScatterTarget, got: torch.Tensor, exact: torch.Tensor, fp8_ulps: int) -> _Judged:
    row = t.rows.shape[1] if t.rows.dim() == 2 else 0
    n = got.numel()
    zeros = torch.zeros_like(got)
    if n == 0 or row == 0:
        return _Judged(zeros, zeros, 0, 0, 0, torch.zeros(0, dtype=torch.int64), 0, [], 0)
    n_slots = n // row
    g, e = got.view(n_slots, row), exact.view(n_slots, row)
    dtype = t.before.dtype
    before_bits = _bits(t.before).reshape(n_slots, row).to(got.device)
    got_bits = _bits(g.to(dtype))
    slots = t.slots.to(got.device)
    named = (slots >= 0) & (slots < n_slots)
    written = torch.zeros(n_slots, dtype=torch.bool, device=got.device)
    written[slots[named]] = True
    # Elsewhere: bit for bit as before (NaN for NaN: a NaN's payload does not survive float64).
    kept = (got_bits == before_bits) | (torch.isnan(g) & torch.isnan(t.before.reshape(n_slots, row).to(g)))
    before64 = t.before.reshape(n_slots, row).to(device=got.device, dtype=torch.float64)
    diff = torch.where(kept, torch.zeros_like(g), _changed(g, before64))
    allowed = torch.zeros_like(g)
    one_step = 0
    if t.fp8:
        ulps = e4m3_ulps(g, e)
        d = torch.where(torch.isinf(ulps), torch.full_like(g, math.inf), exact_agreement(g, e))
        w_allowed = _allowed_for_ulps(d, ulps, fp8_ulps)
        one_step = int(((ulps == 1) & written[:, None]).sum())
    else:
        same = (got_bits == _bits(e.to(dtype))) | (torch.isnan(g) & torch.isnan(e))
        d = torch.where(same, torch.zeros_like(g), _changed(g, e))
        w_allowed = torch.zeros_like(g)
    diff = torch.where(written[:, None], d, diff)
    allowed = torch.where(written[:, None], w_allowed, allowed)
    bad = diff > allowed
    bad_slots = bad.any(1).nonzero().flatten()
    padded: list[tuple[int, int]] = []
    pad_tokens = (t.slots == -1).nonzero().flatten()
    holds_pad = torch.zeros(n_slots, dtype=torch.bool, device=got.device)
    if pad_tokens.numel() and bad_slots.numel():
        cand = bad_slots[:_MATCH_ROWS]
        pad_rows = t.rows[pad_tokens.to(t.rows.device)].to(device=got.device, dtype=torch.float64)  # [P, row]
        here = g[cand][:, None, :]                                                                    # [B, 1, row]
        if t.fp8:
            close = e4m3_ulps(here.expand(-1, pad_rows.shape[0], -1), pad_rows[None].expand(cand.numel(), -1, -1))
            match = (close <= fp8_ulps).all(-1)
        else:
            match = ((here == pad_rows[None]) | (torch.isnan(here) & torch.isnan(pad_rows[None]))).all(-1)
        hit = match.any(1)
        holds_pad[cand[hit]] = True
        for slot, token in zip(cand[hit].tolist(), match[hit].to(torch.int8).argmax(1).tolist()):
            padded.append((slot, int(pad_tokens[token])))
    bad_per_slot = bad.sum(1)
    outside = (bad.any(1) & ~written & ~holds_pad).nonzero().flatten().cpu()
    return _Judged(diff, allowed, int(written.sum()), int((bad_per_slot * (written & ~holds_pad)).sum()), one_step,
                   outside, int(bad_per_slot[outside.to(got.device)].sum()), padded,
                   int(bad_per_slot[holds_pad].sum()))


@dataclass(frozen=True)
class ScatterWrite:
    """Written slots as the oracle has them (copies bit for bit, fp8 within ``fp8_ulps`` steps), every other
    element bit for bit as before. ``targets(*args)`` lists the written tensors (ScatterTarget)."""

    targets: Callable[..., Sequence[ScatterTarget]]
    fp8_ulps: int = 1

    @property
    def rule(self) -> str:
        return ("scatter into persistent state: the slots the mapping names as the float64 oracle has them (a copy "
                f"bit for bit; an fp8 cache within {self.fp8_ulps} fp8 ulp of the exact rounding of x / scale), every "
                "other element of each written tensor bit for bit as before the call; a changed slot is named "
                "(wrote_outside_slots, wrote_padding)")

    def _judge_all(self, got: torch.Tensor, exact: torch.Tensor, args: tuple) -> list[tuple[ScatterTarget, _Judged]]:
        targets = list(self.targets(*args))
        sizes = [t.before.numel() for t in targets]
        if got.numel() != sum(sizes) or exact.numel() != sum(sizes):
            raise ValueError(f"scatter: the result has {got.numel()} elements (the oracle {exact.numel()}), the "
                             f"written tensors ({', '.join(t.name for t in targets)}) {sum(sizes)}")
        parts = zip(targets, torch.split(got.reshape(-1), sizes), torch.split(exact.reshape(-1), sizes))
        return [(t, _judge(t, g, e, self.fp8_ulps)) for t, g, e in parts]

    def errors(self, got: torch.Tensor, exact: torch.Tensor, args: tuple,
               counts: MutableMapping[str, int]) -> CaseErrors:
        judged = self._judge_all(got, exact, args)
        for t, j in judged:
            for key, value in (("slots written", j.written), ("elements written", j.written * t.rows.shape[-1]),
                               ("written elements wrong", j.wrong_written), ("fp8 values one step off", j.one_step),
                               ("elements outside the written slots", j.diff.numel() - j.written * t.rows.shape[-1]),
                               ("wrote_outside_slots elements", j.outside_elements),
                               ("wrote_outside_slots slots", j.outside.numel()),
                               ("wrote_padding elements", j.padded_elements), ("wrote_padding slots", len(j.padded))):
                counts[key] = counts.get(key, 0) + value
            if t.fp8:
                counts["fp8 targets"] = counts.get("fp8 targets", 0) + 1
        if not judged:
            zeros = torch.zeros(0, dtype=torch.float64, device=got.device)
            return CaseErrors(zeros, zeros, zeros)
        diff = torch.cat([j.diff.reshape(-1) for _, j in judged])
        allowed = torch.cat([j.allowed.reshape(-1) for _, j in judged])
        return CaseErrors(diff, allowed, exact.abs())

    def defects(self, got: torch.Tensor, exact: torch.Tensor, args: tuple) -> list[tuple[str, str]]:
        """(kind, message) for each class of wrong write in one case: what ``verify`` adds to the verdict."""
        found = []
        for t, j in self._judge_all(got, exact, args):
            if j.outside.numel():
                first = int(j.outside[0])
                found.append(("wrote_outside_slots", f"{j.outside_elements} elements of {t.name} changed in "
                              f"{j.outside.numel()} slots that slot_mapping does not name, first {t.where(first)}"))
            if j.padded:
                slot, token = j.padded[0]
                n_slots = t.before.numel() // max(t.rows.shape[-1], 1)
                how = (": -1 read as a Python index lands there" if slot == n_slots - 1 else
                       ": -1 read as 0 (clamped or unsigned) lands there" if slot == 0 else "")
                found.append(("wrote_padding", f"{t.name} {t.where(slot)} holds padded token {token}'s row (its slot "
                              f"is -1){how}; {len(j.padded)} such slots, {j.padded_elements} elements"))
        return found

    def summary(self, counts: Mapping[str, int]) -> tuple[str, ...]:
        c = lambda key: counts.get(key, 0)  # noqa: E731
        step = (f"; {c('fp8 values one step off')} fp8 values one step from the exact rounding"
                if c("fp8 targets") else "")
        lines = [f"scatter: {c('slots written')} slots written ({c('elements written')} elements), "
                 f"{c('written elements wrong')} wrong{step}; elements outside them changed: "
                 f"{c('wrote_outside_slots elements')} of {c('elements outside the written slots')}; elements "
                 f"holding a padded token's row: {c('wrote_padding elements')}"]
        for kind in SCATTER_DEFECTS:
            if c(f"{kind} slots"):
                lines.append(f"{kind}: {c(f'{kind} elements')} elements in {c(f'{kind} slots')} slots")
        return tuple(lines)
