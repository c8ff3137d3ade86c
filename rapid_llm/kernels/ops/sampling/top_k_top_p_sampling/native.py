"""The floor for top_k_top_p_sampling: plain torch (a stable sort, an integer cumsum, an inverse-CDF draw).

One token id per row of ``x`` [batch, vocab], drawn from the row's distribution cut to its top k and then to
its nucleus of mass p (vLLM's and FlashInfer's top-k-first order). Every row of the op computes the same
integers, so for a fixed ``seed_offset`` all rows return the same ids from probabilities (and from logits up
to the last bits of exp, which torch, Triton and CUDA round differently):

1. Weights. From probabilities (``from_logits=False``): p in fp32, NaN and negatives as 0, +inf as the largest
   fp32; ``w = floor(div_rn(p, max p) * 2^32)`` (int64, the row's largest is 2^32). From logits: x in fp32,
   NaN as -inf, +inf as the largest fp32, m = max x; ``w = floor(exp(div_rn(x - m, T)) * 2^32)`` (0 where that
   is NaN: -inf at an infinite temperature). A row with no positive weight (every probability 0, every logit
   -inf) has every w = 0. A temperature <= 0 or NaN is greedy: T = 1 and k = 1.
2. The order: w descending, ties to the lower token id (a stable sort). Position j (0-based) is kept iff
   ``j < k`` (k <= 0 or k >= vocab: every position) and ``j == 0 or excl_j < p * W_k`` in float64, where
   excl_j is the integer sum of the weights before j and W_k that of the first k (top-k first, then top-p
   on the renormalised top k). So the first token is always kept (p <= 0 is greedy), p NaN or >= 1 keeps the
   whole top k, and the kept tokens are a prefix of the order.
3. The draw. 53 random bits per row (counter_rng: a hash of (seed, offset, row index)),
   ``t = min(floor(bits * 2^-53 * W_L), W_L - 1)`` in float64 with W_L the kept weights' sum; the token is the
   first id, in token-id order, where the running sum of the kept weights exceeds t. A row whose W_L is 0
   (every weight 0) returns its first kept token, id 0.

Why this form: the weights are integers, so every sum is exact and the order a kernel adds them in cannot
move a draw; the kept set is a prefix of one total order (stated ties), so a kernel finds it with threshold
searches instead of a sort; and the draw walks the vocabulary in id order, which a GPU does in one pass.
A token below 2^-32 of its row's largest weight has weight 0 and is never drawn (the statistical mode's
float64 oracle keeps it; 2^-32 of mass per token is far below what any test can see).

Randomness is a ``seed_offset`` tensor (int64 [2], on x's device), not a torch.Generator: a Generator is no
custom-op schema type, and an int seed is baked into a CUDA graph (each replay would draw the same tokens) and
guarded on by torch.compile (each new seed a recompile). A tensor is read by the kernel on the device, so a
captured graph draws anew when the caller advances the offset in place between replays, and a compiled
function takes any seed. Same (seed, offset), same ids, on every row: a draw is deterministic.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling import counter_rng
from rapid_llm.kernels.platform import describe

OP = "top_k_top_p_sampling"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
K_DTYPES = (torch.int32, torch.int64)
#: The fixed point of the weights: the row's largest weight is 2^32.
ONE = float(1 << 32)
#: The largest vocabulary: every sum of weights stays below 2^53, exact in float64.
MAX_VOCAB = 1 << 21
FLT_MAX = float(torch.finfo(torch.float32).max)


def check(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None, seed_offset: torch.Tensor,
          temperature: torch.Tensor | None = None, from_logits: bool = False, *,
          out: torch.Tensor | None = None) -> None:
    """top_k_top_p_sampling's argument checks, every path's: types, shapes, dtypes and devices, never values."""
    a.tensor(OP, "x", x)
    a.dtype_in(OP, "x", x, DTYPES)
    if x.dim() != 2:
        raise ValueError(f"{OP}: x must be [batch, vocab], got {describe(x)}")
    batch, vocab = x.shape
    if not 1 <= vocab <= MAX_VOCAB:
        raise ValueError(f"{OP}: x must have 1 to {MAX_VOCAB} tokens per row, got {vocab}")
    tensors = {"x": x}
    for name, t, dtypes, what in (("top_k", top_k, K_DTYPES, "int32 or int64"),
                                  ("top_p", top_p, (torch.float32,), "fp32"),
                                  ("temperature", temperature, (torch.float32,), "fp32")):
        if a.optional_tensor(OP, name, t) is not None:
            if t.dim() != 1 or t.shape[0] != batch or t.dtype not in dtypes:
                raise ValueError(f"{OP}: {name} must be [{batch}] {what} (one per row), got {describe(t)}")
            tensors[name] = t
    a.tensor(OP, "seed_offset", seed_offset)
    if tuple(seed_offset.shape) != (2,) or seed_offset.dtype != torch.int64:
        raise ValueError(f"{OP}: seed_offset must be [2] int64 (seed, offset), got {describe(seed_offset)}")
    tensors["seed_offset"] = seed_offset
    a.boolean(OP, "from_logits", from_logits)
    if temperature is not None and not from_logits:
        raise ValueError(f"{OP}: temperature applies to logits only: pass from_logits=True, or no temperature")
    if a.optional_tensor(OP, "out", out) is not None:
        if tuple(out.shape) != (batch,) or out.dtype != torch.int64:
            raise ValueError(f"{OP}: out must be [{batch}] int64, got {describe(out)}")
        tensors["out"] = out
    a.one_device(OP, **tensors)
    if out is not None:
        a.no_overlap(OP, {"out": out}, {k: v for k, v in tensors.items() if k != "out"})


def weights(x: torch.Tensor, temperature: torch.Tensor | None, from_logits: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(w int64 [B, V] in the 2^32 fixed point, greedy bool [B]) by step 1 of the module docstring."""
    v = x.float()
    if not from_logits:
        v = torch.nan_to_num(v, nan=0.0, posinf=FLT_MAX).clamp_min(0.0)
        m = v.amax(dim=1, keepdim=True)
        r = v / torch.where(m > 0, m, torch.ones_like(m))
        return torch.floor(r * ONE).to(torch.int64), torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    v = torch.nan_to_num(v, nan=-torch.inf, posinf=FLT_MAX, neginf=-torch.inf)
    m = v.amax(dim=1, keepdim=True)
    if temperature is None:
        t = torch.ones_like(m)
        greedy = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    else:
        greedy = ~(temperature > 0)  # <= 0 or NaN
        t = torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    e = torch.exp((v - m) / t)
    e = torch.where((m > -torch.inf) & (e == e), e, torch.zeros_like(e))  # all -inf, or -inf / inf: no weight
    return torch.floor(e * ONE).to(torch.int64), greedy


def effective_k(top_k: torch.Tensor | None, greedy: torch.Tensor, vocab: int) -> torch.Tensor:
    """k per row (int64): k <= 0 or k >= vocab means the whole vocabulary; a greedy row 1."""
    full = torch.full_like(greedy, vocab, dtype=torch.int64)
    k = full if top_k is None else top_k.to(torch.int64)
    k = torch.where((k <= 0) | (k >= vocab), full, k)
    return torch.where(greedy, torch.ones_like(k), k)


def kept(w: torch.Tensor, k: torch.Tensor, top_p: torch.Tensor | None) -> torch.Tensor:
    """The kept tokens (bool [B, V], in id order) by step 2 of the module docstring."""
    batch, vocab = w.shape
    order = torch.sort(w, dim=1, descending=True, stable=True).indices
    ws = torch.gather(w, 1, order)
    incl = torch.cumsum(ws, dim=1)
    excl = incl - ws
    pos = torch.arange(vocab, device=w.device).expand(batch, vocab)
    keep = pos < k[:, None]
    if top_p is not None:
        w_k = torch.gather(incl, 1, (k - 1)[:, None])
        p = torch.nan_to_num(top_p.to(torch.float64), nan=1.0)[:, None]
        keep = keep & ((pos == 0) | (excl.to(torch.float64) < p * w_k.to(torch.float64)))
    return torch.zeros_like(keep).scatter_(1, order, keep)


def draw(w: torch.Tensor, keep: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Token ids (int64 [B]) by step 3 of the module docstring, from 53 random bits per row."""
    mass = torch.where(keep, w, torch.zeros_like(w))
    run = torch.cumsum(mass, dim=1)
    total = run[:, -1:]
    u = bits.to(torch.float64)[:, None] * 2.0 ** -53
    t = torch.minimum(torch.floor(u * total.to(torch.float64)).to(torch.int64), total - 1)
    ids = torch.searchsorted(run, t, right=True).squeeze(1)
    first = torch.argmax(keep.to(torch.uint8), dim=1)  # the first kept id: where no weight is positive
    return torch.where(total.squeeze(1) > 0, ids, first)


def top_k_top_p_sampling(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None,
                         seed_offset: torch.Tensor, temperature: torch.Tensor | None = None,
                         from_logits: bool = False, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Token ids (int64 [batch]): one draw per row of x by the module docstring's rule; into ``out`` if given."""
    check(x, top_k, top_p, seed_offset, temperature, from_logits, out=out)
    batch, vocab = x.shape
    w, greedy = weights(x, temperature, from_logits)
    keep = kept(w, effective_k(top_k, greedy, vocab), top_p)
    ids = draw(w, keep, counter_rng.bits53(seed_offset, torch.arange(batch, device=x.device)))
    return ids if out is None else out.copy_(ids)


top_k_top_p_sampling.check = check
