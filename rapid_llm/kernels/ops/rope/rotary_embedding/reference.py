"""rotary_embedding's float64 reference (inputs, oracle, tolerance basis, edge cases) and its benchmark case.

The op rotates q and k in place, so a row is checked through ``call``: it runs
the row on copies of q and k (same layout, storage offset included) and
returns both, flattened and concatenated; the oracle returns the same
concatenation computed in float64.

Each output element is ``x cos - y sin`` or ``y cos + x sin``. Those two terms
can cancel, so ``|exact|`` is the wrong scale for a relative tolerance: an fp32
product rounded before the subtraction is off by about eps * |x cos|, however
small the difference. ``magnitude`` gives the scale the rows' error is
proportional to, ``|x cos| + |y sin|`` per element (``|x|`` for elements past
rot_dim, which pass through unchanged).
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.verification.defects import copy_for_row
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference

#: The bench shape: a 32-query-head, 8-key-head model with head_size 128 (a Llama-3-8B layer), full neox rotary.
BENCH_HEAD_SIZE = 128
BENCH_Q_HEADS = 32
BENCH_K_HEADS = 8
BENCH_MAX_POS = 32768
#: Elements of q per token at the bench shape: bench_op passes numel = T * TOKEN_NUMEL.
TOKEN_NUMEL = BENCH_Q_HEADS * BENCH_HEAD_SIZE
#: The cache the reference inputs index: large enough that random positions rarely repeat by chance.
MAX_POS = 4096


def cos_sin_cache(max_pos: int, rot_dim: int, dtype: torch.dtype, device: torch.device,
                  base: float = 10000.0) -> torch.Tensor:
    """The usual rope cache [max_pos, rot_dim]: cos(pos * f_i) for i < rot_dim/2, then sin(pos * f_i)."""
    inv_freq = base ** (-torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype=dtype, device=device)


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * 2).to(dtype=dtype, device=device)


def make_case(tokens: int, head_size: int, q_heads: int, k_heads: int, rot_dim: int, is_neox: bool,
              dtype: torch.dtype, device: torch.device, gen: torch.Generator, *, cache_dtype: torch.dtype | None = None,
              heads_3d: bool = False, positions: torch.Tensor | None = None, max_pos: int = MAX_POS) -> tuple:
    """Positional args of one call: random q and k, random positions (out of order, repeats allowed)."""
    if positions is None:
        positions = torch.randint(0, max_pos, (tokens,), generator=gen, dtype=torch.int64)
    q_shape = (tokens, q_heads, head_size) if heads_3d else (tokens, q_heads * head_size)
    k_shape = (tokens, k_heads, head_size) if heads_3d else (tokens, k_heads * head_size)
    cache = cos_sin_cache(max_pos, rot_dim, cache_dtype or torch.float32, device)
    return (positions.to(device), _randn(q_shape, dtype, device, gen), _randn(k_shape, dtype, device, gen),
            head_size, cache, is_neox)


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    """numel n of q -> T tokens; small sizes GPT-J style, larger ones neox, each at a different head count.

    n < 16384: head_size 64, 4 q heads, 2 k heads, GPT-J pairs, cache in the input dtype (1 -> T=1, 4097 -> T=16);
    n < 2^20: head_size 128, 16 q heads, 4 k heads, neox, fp32 cache (65536 -> T=32);
    larger: the bench model, 32 q heads and 8 k heads of 128, neox, fp32 cache (2^24 -> T=4096).
    """
    (n,) = shape
    if n < 16384:
        head_size, hq, hk, neox, cache_dtype = 64, 4, 2, False, dtype
    elif n < (1 << 20):
        head_size, hq, hk, neox, cache_dtype = 128, 16, 4, True, torch.float32
    else:
        head_size, hq, hk, neox, cache_dtype = BENCH_HEAD_SIZE, BENCH_Q_HEADS, BENCH_K_HEADS, True, torch.float32
    tokens = 0 if n == 0 else max(1, n // (hq * head_size))
    return make_case(tokens, head_size, hq, hk, head_size, neox, dtype, device, gen, cache_dtype=cache_dtype)


def _strided_like_qkv(tokens: int, head_size: int, hq: int, hk: int, dtype: torch.dtype, device: torch.device,
                      gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k as column slices of one fused qkv projection output: rows strided by (hq + 2 hk) * head_size."""
    qkv = _randn((tokens, (hq + 2 * hk) * head_size), dtype, device, gen)
    return qkv[:, : hq * head_size], qkv[:, hq * head_size: (hq + hk) * head_size]


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    cases = [
        ("T=1, neox, head_size 128, 8 q / 1 k heads", make_case(1, 128, 8, 1, 128, True, dtype, device, gen)),
        ("partial rotary: rot_dim 32 of head_size 128, neox",
         make_case(7, 128, 4, 2, 32, True, dtype, device, gen)),
        ("partial rotary: rot_dim 64 of head_size 128, GPT-J",
         make_case(5, 128, 4, 2, 64, False, dtype, device, gen, cache_dtype=dtype)),
        ("3-D q/k [T, heads, head_size], GPT-J", make_case(6, 64, 6, 2, 64, False, dtype, device, gen, heads_3d=True)),
        ("3-D q/k, neox, cache in the input dtype",
         make_case(6, 64, 3, 3, 64, True, dtype, device, gen, cache_dtype=dtype, heads_3d=True)),
        ("no 16-byte runs: head_size 80, rot_dim 40, neox", make_case(9, 80, 3, 1, 40, True, dtype, device, gen)),
        ("no 16-byte runs: head_size 80, rot_dim 40, GPT-J", make_case(9, 80, 3, 1, 40, False, dtype, device, gen)),
        ("smallest rotary: rot_dim 2 of head_size 16, neox", make_case(4, 16, 2, 1, 2, True, dtype, device, gen)),
        ("positions reversed and repeated, int32",
         make_case(8, 64, 2, 1, 64, True, dtype, device, gen,
                   positions=torch.tensor([4095, 4095, 3, 0, 0, 17, 2, 3], dtype=torch.int32))),
    ]
    # An unaligned start (storage offset 1): no 16-byte accesses; the rows must still be right.
    for neox in (True, False):
        pos, _, _, hs, cache, _ = make_case(3, 64, 4, 2, 64, neox, dtype, device, gen)
        qbase, kbase = _randn((3 * 4 * 64 + 1,), dtype, device, gen), _randn((3 * 2 * 64 + 1,), dtype, device, gen)
        cases.append((f"unaligned q/k (storage offset 1), {'neox' if neox else 'GPT-J'}",
                      (pos, qbase[1:].view(3, 4 * 64), kbase[1:].view(3, 2 * 64), hs, cache, neox)))
    # q and k as slices of a fused qkv tensor: the token stride is not the row length.
    for neox in (True, False):
        pos, _, _, hs, cache, _ = make_case(5, 128, 4, 2, 128, neox, dtype, device, gen)
        q, k = _strided_like_qkv(5, 128, 4, 2, dtype, device, gen)
        cases.append((f"q, k slices of a fused qkv (token stride {q.stride(0)}), {'neox' if neox else 'GPT-J'}",
                      (pos, q, k, hs, cache, neox)))
    return cases


def _rotate64(t: torch.Tensor, head_size: int, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool,
              magnitude: bool) -> torch.Tensor:
    """One tensor's result [T, H, head_size] in float64 (or its error scale, with ``magnitude``)."""
    heads = (t if t.dim() == 3 else t.unflatten(-1, (-1, head_size))).to(torch.float64)
    half = cos.shape[-1]
    rot = heads[..., : 2 * half]
    if is_neox:
        x, y = rot[..., :half], rot[..., half:]
    else:
        pairs = rot.unflatten(-1, (half, 2))
        x, y = pairs[..., 0], pairs[..., 1]
    c, s = cos[:, None, :], sin[:, None, :]
    if magnitude:
        first, second, rest = (x * c).abs() + (y * s).abs(), (y * c).abs() + (x * s).abs(), heads[..., 2 * half:].abs()
    else:
        first, second, rest = x * c - y * s, y * c + x * s, heads[..., 2 * half:]
    if is_neox:
        rotated = torch.cat([first, second], dim=-1)
    else:
        rotated = torch.stack([first, second], dim=-1).flatten(-2)
    return torch.cat([rotated, rest], dim=-1)


def _both64(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int, cache: torch.Tensor,
            is_neox: bool, magnitude: bool) -> torch.Tensor:
    cos_sin = cache.to(torch.float64)[positions.long()]
    half = cache.shape[-1] // 2
    cos, sin = cos_sin[:, :half], cos_sin[:, half:]
    return torch.cat([_rotate64(t, head_size, cos, sin, is_neox, magnitude).flatten() for t in (q, k)])


def oracle(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int, cos_sin_cache: torch.Tensor,
           is_neox: bool) -> torch.Tensor:
    """q then k after the rotation, flattened and concatenated, exactly (float64, the cache as it is stored)."""
    return _both64(positions, q, k, head_size, cos_sin_cache, is_neox, magnitude=False)


def magnitude(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int,
              cos_sin_cache: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """The scale of each output's rounding error: |x cos| + |y sin| (|x| where x passes through)."""
    return _both64(positions, q, k, head_size, cos_sin_cache, is_neox, magnitude=True)


def call(fn, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int, cos_sin_cache: torch.Tensor,
         is_neox: bool) -> torch.Tensor:
    """Run ``fn`` on layout-preserving copies of q and k; return both, flattened and concatenated."""
    q, k = copy_for_row(q, "q"), copy_for_row(k, "k")
    result = fn(positions, q, k, head_size, cos_sin_cache, is_neox)
    if result is not None:
        raise TypeError(f"rotary_embedding works in place and returns None; a row returned {type(result).__name__}")
    return torch.cat([q.flatten(), k.flatten()])


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """The bench model at T = numel // TOKEN_NUMEL tokens, positions 0..T-1, fp32 cache of 32768 positions."""
    tokens = max(1, numel // TOKEN_NUMEL)
    q = torch.empty(tokens, BENCH_Q_HEADS * BENCH_HEAD_SIZE, dtype=dtype, device=device).uniform_(-2, 2)
    k = torch.empty(tokens, BENCH_K_HEADS * BENCH_HEAD_SIZE, dtype=dtype, device=device).uniform_(-2, 2)
    positions = torch.arange(tokens, dtype=torch.int64, device=device) % BENCH_MAX_POS
    cache = cos_sin_cache(BENCH_MAX_POS, BENCH_HEAD_SIZE, torch.float32, device)
    rot_dim = cache.shape[1]
    moved = (2 * (q.numel() + k.numel()) * q.element_size() + positions.numel() * positions.element_size()
             + tokens * rot_dim * cache.element_size())
    return CaseArgs((positions, q, k, BENCH_HEAD_SIZE, cache, True), {}, bytes_moved=moved)


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases,
                      magnitude=magnitude)
