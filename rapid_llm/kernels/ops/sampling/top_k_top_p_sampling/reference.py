"""top_k_top_p_sampling's float64 reference (inputs, the exact distribution and draw, edge cases) and bench case.

A case repeats a few distinct rows many times in one call (rows ``n * B + b`` copy row b): each copy draws its
own number (the draw depends on the row index), so one call gives every distinct row N draws for the
statistical mode (rapid_llm.kernels.verification.sampling_mode). A reference size ``n`` picks the case:
n <= 4097 one row of max(n, 16) tokens (probabilities for n = 1; logits at temperature 0.7, k = 50, p = 0.9
for 4097, as a chat model samples), larger n four rows of 256 tokens from logits with their own k, p and
temperature. The edge cases are the boundaries, in three calls: exact ties at the k-th token, running sums
exactly at p, greedy rows (temperature 0, -1 and NaN, p = 0), k and p switched off every way, NaN, infinite,
negative and all-zero probabilities, a row of -inf logits, a temperature of 1e6, and one token. A case is small
(at most 2^14 elements but for the tail case, 4 copies of 4097): Triton rows run in the interpreter on CPU.

The oracle works in float64 from the exact probabilities (the softmax of logits / T, or the probabilities over
their sum) under the op's rule and tie rule (rapid_llm.kernels.ops.sampling.top_k_top_p_sampling.native), and
returns the token the exact distribution gives the same random number: an exact row draws it nearly always
(the rows' 2^32 fixed point moves a draw only within rounding of a boundary). ``view`` gives the mode the
distinct rows, each one's exact distribution, the tokens a row may draw (boundary tokens within an fp32 row's
rounding either way) and the distributions of three known defects.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling import counter_rng
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference
from rapid_llm.kernels.verification.defects import output_like
from rapid_llm.kernels.verification.sampling_mode import NONDETERMINISTIC, SamplingOutput, SamplingView

#: The bench case: FlashInfer's and vLLM's published shape (batch 128 at this vocabulary).
BENCH_VOCAB = 131072
#: Elements one call of a reference case holds at most (the rows times their copies).
CASE_ELEMENTS = 1 << 14
#: Rows drawn again for the determinism check.
AGAIN_ROWS = 8
_EPS32 = float(torch.finfo(torch.float32).eps)
_FLT_MAX = float(torch.finfo(torch.float32).max)
#: An fp32 row's relative error in a weight, per unit of |z| (the exponent's size) and beyond it.
_WEIGHT_ULPS = 16.0
#: A row is not tested statistically where boundary tokens it may or may not keep carry this much mass.
_AMBIGUOUS_MASS = 1e-6


def sampling_args(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None,
                  seed_offset: torch.Tensor, temperature: torch.Tensor | None = None,
                  from_logits: bool = False) -> tuple:
    """The op's positional arguments (every row takes all six)."""
    return (x, top_k, top_p, seed_offset, temperature, from_logits)


def repeated(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None, temperature: torch.Tensor | None,
             from_logits: bool, copies: int, seed: int, device: torch.device) -> tuple:
    """A case: B distinct rows, each repeated ``copies`` times (row n * B + b copies row b), on ``device``."""
    def rep(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.repeat(copies, *([1] * (t.dim() - 1))).to(device)

    so = torch.tensor([seed, 1000 + seed], dtype=torch.int64, device=device)
    return sampling_args(rep(x), rep(top_k), rep(top_p), so, rep(temperature), from_logits)


def _copies(rows: int, vocab: int) -> int:
    return max(4, min(1024, CASE_ELEMENTS // max(1, rows * vocab)))


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    n = shape[0]
    seed = int(torch.randint(0, 1 << 30, (1,), generator=gen))
    if n <= 0:
        x = torch.empty(0, 32, dtype=dtype)
        return repeated(x, torch.empty(0, dtype=torch.int32), torch.empty(0), None, False, 1, seed, device)
    if n <= 4097:
        vocab = max(n, 16)
        logits = torch.randn(1, vocab, generator=gen) * 2.0
        if n < 4097:
            probs = logits.softmax(-1).to(dtype)
            return repeated(probs, torch.tensor([0], dtype=torch.int32), None, None, False,
                            _copies(1, vocab), seed, device)
        return repeated(logits.to(dtype), torch.tensor([50]), torch.tensor([0.9]), torch.tensor([0.7]), True,
                        _copies(1, vocab), seed, device)
    vocab = 256
    logits = (torch.randn(4, vocab, generator=gen) * 3.0).to(dtype)
    k = torch.tensor([0, 20, 5, 100], dtype=torch.int32)
    p = torch.tensor([0.8, 1.0, 0.95, 0.6])
    t = torch.tensor([1.0, 0.5, 1.5, 0.8])
    return repeated(logits, k, p, t, True, _copies(4, vocab), seed, device)


def _padded(rows: list[list[float]], vocab: int, fill: float) -> torch.Tensor:
    return torch.tensor([r + [fill] * (vocab - len(r)) for r in rows], dtype=torch.float32)


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    """Three calls: probabilities, logits, one token (each row repeated; short rows padded with probability 0
    or logit -inf, which changes no draw)."""
    seed = int(torch.randint(0, 1 << 30, (1,), generator=gen))
    nan, inf = float("nan"), float("inf")
    ties = torch.tensor([0.3, 0.1, 0.05])[torch.randint(0, 3, (2, 32), generator=gen)]
    ties[:, :3] = 0.3  # three at the top: k = 2 cuts among equal values
    geometric = (0.5 ** torch.arange(1, 17, dtype=torch.float32)).tolist()
    probs = torch.cat([
        ties,                                                                  # k = 2, 5: ties at the k-th token
        _padded([[0.5, 0.25, 0.125, 0.125]] * 2, 32, 0.0),                     # running sums exactly at p
        _padded([[0.4, 0.3, 0.1, 0.1, 0.1]] * 2, 32, 0.0),                     # top-k first, then p
        _padded([geometric] * 4, 32, 0.0),                                     # k and p off every way
        _padded([[0.2, nan, 0.3, 0.1, -1.0, 0.4], [1.0, inf, 2.0, inf, 0.0, 0.0], [0.0] * 6, [nan] * 6], 32, 0.0),
    ])
    k = torch.tensor([2, 5, 0, 0, 3, 2, -3, 0, 99, 16, 0, 0, 4, 0])
    p = torch.tensor([1.0, 0.9, 0.75, 0.5, 0.75, 0.6, nan, 2.5, 1.0, 0.5, 0.9, 0.9, 0.9, 0.0])
    logits = torch.cat([
        torch.randn(4, 48, generator=gen) * 2.0,                                # temperatures
        _padded([[math.log(g * 4) for g in geometric]] * 3, 48, -inf),         # greedy: T = 0, -1, NaN
        _padded([[0.5, nan, 1.0, -inf, 2.0, 0.0], [-inf] * 6, [1.0, inf, 0.0, inf, -inf, 3.0]], 48, -inf),
    ])
    lk = torch.tensor([10, 10, 0, 10, 0, 0, 0, 3, 0, 0])
    lp = torch.tensor([0.9, 0.9, 0.8, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.9])
    lt = torch.tensor([0.5, 2.0, 0.25, 1e6, 0.0, -1.0, nan, 1.0, 1.0, 1.0])
    return [
        ("[14 x 64, 32] probabilities: ties at the k-th token (k = 2, 5), running sums exactly at p, top-k then p, "
         "k and p off every way (k = -3, 0, 99; p = NaN, 2.5), p = 0, NaN, +inf, negative and all-zero rows",
         repeated(probs.to(dtype), k, p, None, False, 64, seed, device)),
        ("[10 x 96, 48] logits: temperatures 0.5, 2, 0.25, 1e6; greedy rows (T = 0, -1, NaN; p = 0); NaN, +inf and "
         "-inf logits, a row of -inf",
         repeated(logits.to(dtype), lk, lp, lt, True, 96, seed + 1, device)),
        ("[1 x 64, 1] one token",
         repeated(torch.tensor([[0.7]]).to(dtype), torch.tensor([1]), torch.tensor([0.5]), None, False, 64, seed + 2,
                  device)),
    ]


# ------------------------------------------------------------------ the exact distribution


def _exact(x: torch.Tensor, top_k: torch.Tensor | None, temperature: torch.Tensor | None, from_logits: bool,
           ignore_temperature: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q [R, V] exact probabilities, |z| [R, V] the exponent's size, k [R] int64) in float64 by the op's step 1."""
    rows, vocab = x.shape
    v = x.to(torch.float64)
    greedy = torch.zeros(rows, dtype=torch.bool, device=x.device)
    if not from_logits:
        v = torch.nan_to_num(v, nan=0.0, posinf=_FLT_MAX).clamp_min(0.0)
        z = torch.zeros_like(v)
        q = v
    else:
        v = torch.nan_to_num(v, nan=-math.inf, posinf=_FLT_MAX, neginf=-math.inf)
        m = v.amax(dim=1, keepdim=True) if vocab else v
        t = torch.ones(rows, 1, dtype=torch.float64, device=x.device)
        if temperature is not None and not ignore_temperature:
            temp = temperature.to(torch.float64)
            greedy = ~(temp > 0)
            t = torch.where(greedy, torch.ones_like(temp), temp)[:, None]
        z = (v - m) / t
        z = torch.where(m > -math.inf, z, torch.full_like(z, -math.inf))
        q = torch.exp(z).nan_to_num(nan=0.0)  # -inf / inf: no weight, as the rows
    s = q.sum(dim=1, keepdim=True)
    q = q / torch.where(s > 0, s, torch.ones_like(s))
    k = torch.full((rows,), vocab, dtype=torch.int64, device=x.device)
    if top_k is not None:
        k = top_k.to(torch.int64)
        k = torch.where((k <= 0) | (k >= vocab), torch.full_like(k, vocab), k)
    k = torch.where(greedy, torch.ones_like(k), k)
    return q, z.abs().nan_to_num(nan=math.inf), k


def _kept(q: torch.Tensor, k: torch.Tensor, top_p: torch.Tensor | None, *, inclusive: bool = False,
          p_first: bool = False) -> torch.Tensor:
    """The kept tokens (bool [R, V], id order) by the op's step 2, exactly; ``inclusive`` (the running sum with
    the token itself) and ``p_first`` (p on the whole distribution) are two known defects' rules."""
    rows, vocab = q.shape
    order = torch.sort(q, dim=1, descending=True, stable=True).indices
    qs = torch.gather(q, 1, order)
    incl = torch.cumsum(qs, dim=1)
    pos = torch.arange(vocab, device=q.device).expand(rows, vocab)
    keep = pos < k[:, None]
    if top_p is not None and vocab:
        p = torch.nan_to_num(top_p.to(torch.float64), nan=1.0)[:, None]
        mass = incl[:, -1:] if p_first else torch.gather(incl, 1, (k - 1)[:, None])
        run = incl if inclusive else incl - qs
        keep = keep & ((pos == 0) | (run < p * mass))
    return torch.zeros_like(keep).scatter_(1, order, keep)


def _renormalised(q: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    d = torch.where(keep, q, torch.zeros_like(q))
    s = d.sum(dim=1, keepdim=True)
    first = torch.zeros_like(d).scatter_(1, torch.argmax(keep.to(torch.uint8), dim=1, keepdim=True), 1.0)
    return torch.where(s > 0, d / torch.where(s > 0, s, torch.ones_like(s)), first)


def _may_and_sure(q: torch.Tensor, zabs: torch.Tensor, k: torch.Tensor,
                  top_p: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(may, sure) [R, V]: the tokens an fp32 row may keep and those it surely keeps, by the op's rule with each
    weight within its rounding (relative 16 fp32 ulps x (1 + |z|), and 2^-31 of the row's largest)."""
    rows, vocab = q.shape
    c = (_WEIGHT_ULPS * _EPS32 * (1.0 + zabs)).clamp_max(0.25)
    a = 2.0 ** -31 * q.amax(dim=1, keepdim=True)
    order = torch.sort(q, dim=1, descending=True, stable=True).indices
    qs = torch.gather(q, 1, order)
    asc = qs.flip(1).contiguous()
    top = torch.cat([torch.zeros(rows, 1, dtype=q.dtype, device=q.device), torch.cumsum(qs, dim=1)], dim=1)
    pos = torch.arange(vocab, device=q.device).expand(rows, vocab)
    cs = torch.gather(c, 1, order)

    def above(thr: torch.Tensor, strict: bool) -> torch.Tensor:  # how many q are > thr (>= thr)
        return vocab - torch.searchsorted(asc, thr.contiguous(), right=strict)

    start = above(qs, True)          # the first position of each value's group of equal values
    end = above(qs, False)           # one past its last
    tie_before, tie_after = pos - start, end - 1 - pos
    ahead = above((qs * (1 + cs) + 2 * a) / (1 - cs), True)
    rank_min = ahead + tie_before
    excl_min = torch.gather(top, 1, ahead) + tie_before * qs
    behind = above((qs * (1 - cs) - 2 * a) / (1 + cs), False)
    rank_max = behind - 1 - tie_after
    excl_max = torch.gather(top, 1, behind) - qs - tie_after * qs
    may = rank_min < k[:, None]
    sure = rank_max < k[:, None]
    if top_p is not None and vocab:
        p = torch.nan_to_num(top_p.to(torch.float64), nan=1.0)[:, None]
        w_k = torch.gather(top, 1, k[:, None])
        big = p * w_k
        slack = 4.0 * ((cs * qs).sum(dim=1, keepdim=True) + vocab * a) * p.abs().clamp_min(1.0)
        may = may & ((rank_min == 0) | (excl_min < big + slack))
        sure = sure & ((rank_max <= 0) | (excl_max < big - slack))
    may_ids = torch.zeros_like(may).scatter_(1, order, may)
    sure_ids = torch.zeros_like(sure).scatter_(1, order, sure)
    return may_ids, sure_ids


def _distinct(args: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """(the index of each row's first copy [U], each row's distinct row [R]): rows equal in x, k, p and T."""
    x, top_k, top_p, _, temperature, _ = args
    rows = x.shape[0]
    parts = [x.to("cpu", torch.float64).nan_to_num(nan=7.5e307)]
    for t in (top_k, top_p, temperature):
        if t is not None:
            parts.append(t.to("cpu", torch.float64).nan_to_num(nan=7.5e307)[:, None])
    key = torch.cat(parts, dim=1)
    if rows == 0:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    _, group = torch.unique(key, dim=0, return_inverse=True)
    first = torch.full((int(group.max()) + 1,), rows, dtype=torch.int64).scatter_reduce_(
        0, group, torch.arange(rows), reduce="amin")
    return first, group


def oracle(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None, seed_offset: torch.Tensor,
           temperature: torch.Tensor | None = None, from_logits: bool = False) -> torch.Tensor:
    """The exact distribution's token for each row's random number (float64 [R]): inverse CDF in id order."""
    q, _, k = _exact(x, top_k, temperature, from_logits)
    dist = _renormalised(q, _kept(q, k, top_p))
    rows = x.shape[0]
    if rows == 0:
        return torch.zeros(0, dtype=torch.float64, device=x.device)
    u = counter_rng.bits53(seed_offset, torch.arange(rows, device=x.device)).to(torch.float64) * 2.0 ** -53
    run = torch.cumsum(dist, dim=1)
    t = (u[:, None] * run[:, -1:]).contiguous()
    ids = torch.searchsorted(run, t, right=True).clamp_max(x.shape[1] - 1).squeeze(1)
    return ids.to(torch.float64)


def view(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None, seed_offset: torch.Tensor,
         temperature: torch.Tensor | None = None, from_logits: bool = False) -> SamplingView:
    """What the sampling mode needs of a case: the distinct rows, each one's exact distribution, the tokens it may
    draw, whether its boundary is ambiguous, and the distributions three known defects draw from."""
    first, group = _distinct((x, top_k, top_p, seed_offset, temperature, from_logits))

    def pick(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to("cpu")[first]

    xs, ks, ps, ts = pick(x), pick(top_k), pick(top_p), pick(temperature)
    q, zabs, k = _exact(xs, ks, ts, from_logits)
    keep = _kept(q, k, ps)
    probs = _renormalised(q, keep)
    may, sure = _may_and_sure(q, zabs, k, ps)
    may = may | keep
    edge = torch.where(may & ~sure, q, torch.zeros_like(q)).sum(1)
    ambiguous = edge > _AMBIGUOUS_MASS * torch.where(keep, q, torch.zeros_like(q)).sum(1)
    alternatives = {}
    if ps is not None:
        alternatives["nucleus_off_by_one"] = _renormalised(q, _kept(q, k, ps, inclusive=True))
        alternatives["p_before_k"] = _renormalised(q, _kept(q, k, ps, p_first=True))
    if from_logits and ts is not None:
        q1, _, k1 = _exact(xs, ks, ts, from_logits, ignore_temperature=True)
        alternatives["temperature_ignored"] = _renormalised(q1, _kept(q1, k1, ps))
    alternatives = {name: d for name, d in alternatives.items() if d.shape[0] and float((d - probs).abs().max()) > 1e-9}
    return SamplingView(group, probs, may, ambiguous, alternatives)


def call(fn: Any, x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None,
         seed_offset: torch.Tensor, temperature: torch.Tensor | None = None, from_logits: bool = False) -> torch.Tensor:
    """Run the row on a poisoned ``out``, then its first rows again (the same draws are due): float64 ids, an
    unwritten one as the poison's bits, one drawn differently the second time as NONDETERMINISTIC."""
    out = output_like(torch.empty(0, dtype=torch.int64, device=x.device), (x.shape[0],))
    ids = fn(x, top_k, top_p, seed_offset, temperature, from_logits, out=out)
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"top_k_top_p_sampling returns a tensor of ids, got {type(ids).__name__}")
    n = min(AGAIN_ROWS, x.shape[0])

    def head(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t[:n]

    again = fn(head(x), head(top_k), head(top_p), seed_offset, head(temperature), from_logits)
    got = ids.to(torch.float64)
    poisoned = ids == -1
    poison = torch.full_like(ids, -1).view(torch.float64)  # all-ones bits: verify's unwritten check sees them
    got = torch.where(poisoned, poison, got)
    unstable = torch.zeros_like(poisoned)
    unstable[:n] = again.to(ids.device) != ids[:n]
    return torch.where(unstable & ~poisoned, torch.full_like(got, NONDETERMINISTIC), got)


# ------------------------------------------------------------------ bench case


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """numel // 131072 rows of 131072 probabilities (one row of numel below that), each row with its own k in
    [1, 100] and p = 0.9: FlashInfer's top_k_top_p_sampling_from_probs at batch 128 is numel = 2^24 (one of
    bench_op's default GPU sizes). No token_numel: a row is a whole vocabulary, and the CPU passes over the shipped
    rows (tests/contract) run the Triton row in the interpreter at the small sizes only."""
    rows, vocab = (numel // BENCH_VOCAB, BENCH_VOCAB) if numel >= BENCH_VOCAB else (1, max(1, numel))
    probs = torch.empty((rows, vocab), dtype=torch.float32, device=device).exponential_().pow_(4.0)
    probs = (probs / probs.sum(dim=1, keepdim=True)).to(dtype)
    top_k = torch.randint(1, 101, (rows,), dtype=torch.int32, device=device)
    top_p = torch.full((rows,), 0.9, dtype=torch.float32, device=device)
    seed_offset = torch.tensor([1234, 0], dtype=torch.int64, device=device)
    return CaseArgs(sampling_args(probs, top_k, top_p, seed_offset), {},
                    bytes_moved=rows * vocab * probs.element_size() + rows * (4 + 4 + 8))


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases,
                      compare=SamplingOutput(view=view))
