"""The statistical comparison rule: a sampler's draws against the exact distribution, plus what is exact.

A sampling op (``top_k_top_p_sampling``) returns a random token per row: no oracle gives the output, and the
per-element rule cannot judge it. So a case repeats each of a few distinct rows N times in one call (every
copy draws its own number: the draw depends on the row index), and this mode judges the draws:

- **the support, exactly**: every draw is a token the row may draw: inside its top-k / nucleus set under the
  op's tie rule, with tokens within the row's rounding of a boundary (a near tie at the k-th token, a running
  sum within rounding of p * mass) allowed either way. A draw outside it, or not a token id at all, is
  ``sampled_outside_set``.
- **the distribution, statistically**: per distinct row, the draws' counts against N times the exact
  renormalised distribution (float64), Pearson's chi-square with every bin expecting fewer than
  ``min_expected`` draws pooled into one; a case sums its rows' statistics and degrees of freedom and fails
  when the chi-square tail probability is below ``alpha``: the false-alarm rate of one case of an honest
  row (``benchmarks/sampling_false_alarm.py`` measures it). A failing case is ``wrong_distribution``, unless
  the draws fit one of the alternatives the op's view names (its support and the same test at ``alpha``):
  then that alternative is the defect (``nucleus_off_by_one``, ``p_before_k``, ``temperature_ignored``).
  Where several alternatives fit (a case too small to tell them apart), the one under which the draws are
  likeliest is named. A row whose boundary is ambiguous (a token of real mass within rounding of it) is not
  tested, and counted.
- **determinism**: the op's ``call`` draws the first rows again; a different token for the same row, seed
  and offset comes back as :data:`NONDETERMINISTIC` and is ``nondeterministic``.

The op gives ``view(*args)``: a :class:`SamplingView` of a case from its arguments (rows grouped by identity,
each group's exact distribution, the tokens it may draw, and the alternatives). The result a row's ``call``
returns is one float64 token id per row; the oracle's is the float64 draw for the same random number (so an
exact row agrees with it draw for draw, and the report's worst elements are meaningful).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, MutableMapping, NamedTuple

import torch

from rapid_llm.kernels.verification.compare_modes import CaseErrors

__all__ = ["SamplingView", "SamplingOutput", "CLASSES", "ALTERNATIVES", "NONDETERMINISTIC", "chi_square"]

#: The classes a failing case is named by, alternatives first (a draw that fits one is that defect).
ALTERNATIVES = ("nucleus_off_by_one", "p_before_k", "temperature_ignored")
CLASSES = ("sampled_outside_set", "wrong_distribution", "nondeterministic", *ALTERNATIVES)
#: What ``call`` returns for a draw that changed when drawn again with the same seed and offset.
NONDETERMINISTIC = -2.0
_FIRST = "first "
_SAME = "draws as the oracle's"


class SamplingView(NamedTuple):
    """One case, from its arguments: ``group`` [R] int64 (the distinct row each row repeats), and per distinct
    row [U, V] float64 / bool: ``probs`` the exact renormalised distribution, ``may`` the tokens a row may draw
    (the kept set, with boundary tokens within rounding), ``ambiguous`` [U] rows whose boundary tokens carry
    real mass (not tested statistically), and ``alternatives``: name -> the distribution a known defect draws
    from (where it differs from ``probs``)."""

    group: torch.Tensor
    probs: torch.Tensor
    may: torch.Tensor
    ambiguous: torch.Tensor
    alternatives: Mapping[str, torch.Tensor] = {}


def chi_square(counts: torch.Tensor, probs: torch.Tensor, n: int, min_expected: float) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom of one row's counts [V] against ``n * probs`` over the tokens
    of positive probability, bins expecting fewer than ``min_expected`` pooled (into the smallest other bin where
    the pool is still small); (0, 0) where fewer than two bins remain."""
    support = probs > 0
    e = probs[support] * n
    c = counts[support].to(torch.float64)
    small = e < min_expected
    big_e, big_c = e[~small], c[~small]
    pool_e, pool_c = float(e[small].sum()), float(c[small].sum())
    if pool_e > 0:
        if pool_e >= min_expected or big_e.numel() == 0:
            big_e = torch.cat([big_e, big_e.new_tensor([pool_e])])
            big_c = torch.cat([big_c, big_c.new_tensor([pool_c])])
        else:
            i = int(torch.argmin(big_e))
            big_e = big_e.clone()
            big_c = big_c.clone()
            big_e[i] += pool_e
            big_c[i] += pool_c
    if big_e.numel() < 2:
        return 0.0, 0
    return float(((big_c - big_e) ** 2 / big_e).sum()), int(big_e.numel() - 1)


def tail(stat: float, df: int) -> float:
    """P(chi-square with ``df`` degrees of freedom >= stat); 1 for no degrees of freedom."""
    if df <= 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


class _Judged(NamedTuple):
    valid: torch.Tensor         # [R] a token id
    outside: torch.Tensor       # [R] outside the tokens the row may draw (or not a token id)
    unstable: torch.Tensor      # [R] drawn differently the second time
    p_value: float              # the case's tail probability (1 where nothing was tested)
    tested: int                 # distinct rows tested
    failing: torch.Tensor       # [U] rows whose own test fails at alpha
    fits: tuple[str, ...]       # alternatives the draws fit


@dataclass(frozen=True)
class SamplingOutput:
    """Draws inside the set, distributed as the exact distribution at false-alarm rate ``alpha`` per case."""

    view: Callable[..., SamplingView]
    alpha: float = 1e-4
    min_expected: float = 5.0

    @property
    def rule(self) -> str:
        return (f"sampling: every draw inside the row's top-k / nucleus set (rounding at a boundary either way); "
                f"each distinct row's counts against the exact distribution by Pearson's chi-square (bins under "
                f"{self.min_expected:g} expected draws pooled), a case failing below p = {self.alpha:g} (its "
                "false-alarm rate); the same draw for the same seed and offset")

    def _judge(self, got: torch.Tensor, args: tuple) -> tuple[SamplingView, _Judged]:
        v = self.view(*args)
        rows = got.numel()
        vocab = v.probs.shape[1] if v.probs.dim() == 2 else 0
        got = got.reshape(-1).to("cpu", torch.float64)
        unstable = got == NONDETERMINISTIC
        valid = torch.isfinite(got) & (got == got.round()) & (got >= 0) & (got < vocab)
        ids = torch.where(valid, got, torch.zeros_like(got)).long()
        group = v.group.to("cpu")
        may = v.may.to("cpu")
        outside = ~unstable & (~valid | ~may[group, ids] if rows else ~valid)
        def tally(which: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            counts = torch.zeros(v.probs.shape, dtype=torch.float64)
            counts.index_put_((group[which], ids[which]), torch.ones(int(which.sum()), dtype=torch.float64),
                              accumulate=True)
            return counts, counts.sum(dim=1)

        inside = tally(valid & ~outside & ~unstable)  # the exact distribution's test: its support's draws
        every = tally(valid & ~unstable)              # an alternative's: every draw
        probs = v.probs.to("cpu", torch.float64)

        def test(dist: torch.Tensor, skip: torch.Tensor, drawn: tuple) -> tuple[float, torch.Tensor, int]:
            counts, n_per = drawn
            stat, df, tested = 0.0, 0, 0
            failing = torch.zeros(dist.shape[0], dtype=torch.bool)
            for u in range(dist.shape[0]):
                if bool(skip[u]):
                    continue
                s, d = chi_square(counts[u], dist[u], int(n_per[u]), self.min_expected)
                if d:
                    tested += 1
                    failing[u] = tail(s, d) < self.alpha
                stat, df = stat + s, df + d
            return tail(stat, df), failing, tested

        p_value, failing, tested = test(probs, v.ambiguous.to("cpu"), inside)
        fits: dict[str, float] = {}
        if (p_value < self.alpha or bool(outside.any())) and rows:
            for name in ALTERNATIVES:
                alt = v.alternatives.get(name)
                if alt is None:
                    continue
                alt = alt.to("cpu", torch.float64)
                if bool((~valid).any()) or bool((alt[group[valid], ids[valid]] <= 0).any()):
                    continue  # a draw the alternative cannot make
                alt_p, _, _ = test(alt, torch.zeros(alt.shape[0], dtype=torch.bool), every)
                if alt_p >= self.alpha:  # fits: scored by the draws' log-likelihood under it
                    fits[name] = float(torch.log(alt[group[valid], ids[valid]]).sum())
        best = max(fits.values(), default=None)
        named = tuple(name for name, score in fits.items() if score == best)  # the likeliest (ties: all)
        return v, _Judged(valid, outside, unstable, p_value, tested, failing, named)

    def errors(self, got: torch.Tensor, exact: torch.Tensor, args: tuple,
               counts: MutableMapping[str, int]) -> CaseErrors:
        if got.numel() != exact.numel():
            raise ValueError(f"sampling: the result has {got.numel()} draws, the case {exact.numel()} rows")
        v, j = self._judge(got, args)
        dev = exact.device
        g = got.reshape(-1).to(dev, torch.float64)
        e = exact.reshape(-1)
        diff = (g - e).abs().nan_to_num(nan=math.inf)
        bad = (j.outside | j.unstable).to(dev)
        if j.p_value < self.alpha and g.numel():
            # A failing case: the draws of its failing rows (all rows where none fails alone) that differ from the
            # oracle's draw for the same number are the wrong elements.
            rows = j.failing if bool(j.failing.any()) else torch.ones_like(j.failing)
            bad = bad | (rows[v.group.to("cpu")].to(dev) & (diff > 0))
        allowed = torch.where(bad, torch.zeros_like(diff), diff)
        scale = e.abs().clamp_min(1.0)
        counts["rows"] = counts.get("rows", 0) + g.numel()
        counts["distinct rows"] = counts.get("distinct rows", 0) + int(v.probs.shape[0])
        counts["tested rows"] = counts.get("tested rows", 0) + j.tested
        counts["ambiguous rows"] = counts.get("ambiguous rows", 0) + int(v.ambiguous.sum())
        counts["cases tested"] = counts.get("cases tested", 0) + int(j.tested > 0)
        counts["cases failing"] = counts.get("cases failing", 0) + int(j.p_value < self.alpha)
        counts[_SAME] = counts.get(_SAME, 0) + int((diff == 0).sum())
        counts["sampled_outside_set"] = counts.get("sampled_outside_set", 0) + int(j.outside.sum())
        counts["nondeterministic"] = counts.get("nondeterministic", 0) + int(j.unstable.sum())
        lowest = counts.get("lowest p", None)
        if j.tested and (lowest is None or j.p_value < lowest):
            counts["lowest p"] = j.p_value
        if bool(j.outside.any()) and not any(k.startswith(_FIRST + "sampled_outside_set") for k in counts):
            r = int(j.outside.nonzero()[0, 0])
            counts[f"{_FIRST}sampled_outside_set: row {r} drew {_token(g[r])}, the oracle {_token(e[r])}"] = 1
        return CaseErrors(diff, allowed, scale)

    def defects(self, got: torch.Tensor, exact: torch.Tensor, args: tuple) -> list[tuple[str, str]]:
        """The classes of a failing case, each a defect kind verify puts in the verdict."""
        _, j = self._judge(got, args)
        found = []
        if j.fits:
            found += [(name, f"the draws fit the distribution of this defect (p >= {self.alpha:g}), not the "
                             f"exact one (p = {j.p_value:.3g})") for name in j.fits]
        else:
            if bool(j.outside.any()):
                found.append(("sampled_outside_set", f"{int(j.outside.sum())} of {j.outside.numel()} draws outside "
                                                     "the row's top-k / nucleus set (or not a token id)"))
            if j.p_value < self.alpha:
                found.append(("wrong_distribution", f"chi-square p = {j.p_value:.3g} < {self.alpha:g} over "
                                                    f"{j.tested} rows, and no known defect's distribution fits"))
        if bool(j.unstable.any()):
            found.append(("nondeterministic", f"{int(j.unstable.sum())} draws differ when drawn again with the same "
                                              "seed and offset"))
        return found

    def summary(self, counts: Mapping[str, int]) -> tuple[str, ...]:
        lines = [f"sampling: {counts.get('cases failing', 0)} of {counts.get('cases tested', 0)} cases fail the "
                 f"chi-square at p < {self.alpha:g} (lowest p {counts.get('lowest p', 1.0):.3g}; "
                 f"{counts.get('tested rows', 0)} of {counts.get('distinct rows', 0)} distinct rows tested, "
                 f"{counts.get('ambiguous rows', 0)} with an ambiguous boundary)",
                 f"sampling: sampled_outside_set {counts.get('sampled_outside_set', 0)}, nondeterministic "
                 f"{counts.get('nondeterministic', 0)} of {counts.get('rows', 0)} draws; "
                 f"{counts.get(_SAME, 0)} drew the float64 oracle's token for the same random number"]
        lines += [f"sampling: {key.removeprefix(_FIRST)}" for key in counts if key.startswith(_FIRST)]
        return tuple(lines)


def _token(x: torch.Tensor) -> str:
    v = float(x)
    return str(int(v)) if math.isfinite(v) and v == round(v) else repr(v)
