"""reshape_and_cache_flash's float64 reference (inputs, oracle, edge cases), its comparison rule and bench case.

The op writes into two caches, so ``call`` runs a row on layout-preserving copies of them and returns both
after the call, as float64, flattened and concatenated (key_cache, then value_cache); the oracle returns the
same, computed from the caches as they were and key and value in float64. The comparison is the scatter
mode (rapid_llm.kernels.verification.scatter_mode): the written slots as the oracle has them (bit for bit
for a copy, within one fp8 step for an fp8 cache), every other element of both caches bit for bit as it was,
and a changed slot named: written outside slot_mapping, or holding a padded token's row.

The caches start filled with random values (never zeros), so a write anywhere shows. A reference size n is
n elements of key: small sizes at 4 heads of 64, up to 2^20 at 8 heads of 256, larger at the bench shape
(Llama-3-8B's 8 kv heads of 128); each with about one padded token in seven, slots drawn without repeats from a
cache with room to spare.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops.cache.reshape_and_cache_flash.native import FP8, FP8_MAX
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference
from rapid_llm.kernels.verification.compare_modes import round_to_e4m3
from rapid_llm.kernels.verification.defects import copy_for_row
from rapid_llm.kernels.verification.scatter_mode import ScatterTarget, ScatterWrite

#: The bench shape: Llama-3-8B's 8 kv heads of 128, vLLM's default block size.
BENCH_HEADS = 8
BENCH_HEAD_SIZE = 128
BENCH_BLOCK_SIZE = 16
#: Elements of key per token at the bench shape: bench_op passes numel = T * TOKEN_NUMEL.
TOKEN_NUMEL = BENCH_HEADS * BENCH_HEAD_SIZE


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator,
           scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype=dtype, device=device)


def _scales(k: float, v: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.tensor([k], dtype=torch.float32, device=device),
            torch.tensor([v], dtype=torch.float32, device=device))


def random_slots(tokens: int, num_slots: int, gen: torch.Generator, pad_every: int = 7) -> torch.Tensor:
    """Distinct slots in random order, every ``pad_every``-th token (from a random start) padding (-1)."""
    slots = torch.randperm(num_slots, generator=gen)[:tokens].to(torch.int64)
    if pad_every and tokens:
        start = int(torch.randint(0, pad_every, (1,), generator=gen))
        slots[start::pad_every] = -1
    return slots


def make_case(tokens: int, heads: int, head_size: int, block_size: int, num_blocks: int, dtype: torch.dtype,
              device: torch.device, gen: torch.Generator, *, fp8: bool = False, slots: torch.Tensor | None = None,
              scales: tuple[float, float] = (0.02, 0.05), spread: float = 1.0) -> tuple:
    """Positional args of one call: random key/value, random caches, slots (random distinct by default)."""
    cache_dtype = FP8 if fp8 else dtype
    cache_shape = (num_blocks, block_size, heads, head_size)
    key_cache = _randn(cache_shape, torch.float32, device, gen, 2.0).to(cache_dtype)
    value_cache = _randn(cache_shape, torch.float32, device, gen, 2.0).to(cache_dtype)
    if slots is None:
        slots = random_slots(tokens, num_blocks * block_size, gen)
    key = _randn((tokens, heads, head_size), dtype, device, gen, spread)
    value = _randn((tokens, heads, head_size), dtype, device, gen, spread)
    return (key, value, key_cache, value_cache, slots.to(device), *_scales(*scales, device))


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    """n elements of key -> T tokens (n < 16384: 4 heads of 64; n < 2^20: 8 heads of 256; larger: the bench
    shape), block 16, and two blocks of slots to spare; 0 tokens, an empty cache. Few tokens a size: the Triton
    row runs in the interpreter on CPU, a few ms a token."""
    (n,) = shape
    heads, head_size = (4, 64) if n < 16384 else (8, 256) if n < (1 << 20) else (BENCH_HEADS, BENCH_HEAD_SIZE)
    tokens = 0 if n == 0 else max(1, n // (heads * head_size))
    num_blocks = 0 if tokens == 0 else -(-tokens // 16) + 2
    return make_case(tokens, heads, head_size, 16, num_blocks, dtype, device, gen)


def _fused_qkv(tokens: int, q_heads: int, heads: int, head_size: int, dtype: torch.dtype, device: torch.device,
               gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """key and value as [T, H, D] views of one fused qkv projection output: the token stride is the whole row."""
    qkv = _randn((tokens, (q_heads + 2 * heads) * head_size), dtype, device, gen)
    k = qkv[:, q_heads * head_size:(q_heads + heads) * head_size].unflatten(1, (heads, head_size))
    v = qkv[:, (q_heads + heads) * head_size:].unflatten(1, (heads, head_size))
    return k, v


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    def case(tokens: int, heads: int = 2, head_size: int = 64, block_size: int = 16, num_blocks: int = 4,
             **kw) -> tuple:
        return make_case(tokens, heads, head_size, block_size, num_blocks, dtype, device, gen, **kw)

    t = lambda *s: torch.tensor(s, dtype=torch.int64)  # noqa: E731
    cases = [
        ("all padding (5 tokens, every slot -1)", case(5, slots=t(-1, -1, -1, -1, -1))),
        ("one token, slot 0", case(1, slots=t(0))),
        ("T = 19, block 16, 2 blocks to spare", case(19, num_blocks=3)),
        ("slots in the last block, the last slot included", case(4, num_blocks=3, slots=t(47, 32, -1, 40))),
        ("slots descending across blocks, padding first and last",
         case(8, num_blocks=4, slots=t(-1, 63, 50, 33, 17, 16, 1, -1))),
        ("every slot of the cache, shuffled", case(16, block_size=4, num_blocks=4,
                                                   slots=torch.randperm(16, generator=gen))),
        ("block_size 1", case(6, block_size=1, num_blocks=9)),
        ("head_size 20 (no 16-byte runs), block 5", case(7, heads=1, head_size=20, block_size=5, num_blocks=3)),
        ("fp8 cache, scales 0.02 / 0.05", case(11, num_blocks=2, fp8=True, heads=4)),
        ("fp8 cache, values past 448 x scale saturate; tiny ones fp8 subnormals",
         case(12, num_blocks=2, fp8=True, spread=20.0, scales=(0.01, 0.001))),
        ("fp8 cache, scale 1, the last slot and padding", case(3, num_blocks=2, fp8=True, scales=(1.0, 1.0),
                                                               slots=t(31, -1, 0))),
    ]
    # key and value sliced out of a fused qkv projection: token stride (4 + 2 * 2) * 64.
    k, v = _fused_qkv(6, 4, 2, 64, dtype, device, gen)
    _, _, kc, vc, slots, ks, vs = case(6)
    cases.append(("key, value slices of a fused qkv (token stride 512)", (k, v, kc, vc, slots, ks, vs)))
    # vLLM's cache tensor [num_blocks, 2, block_size, H, D]: key_cache and value_cache are its two halves.
    kv = _randn((4, 2, 16, 2, 64), torch.float32, device, gen, 2.0).to(dtype)
    key, value, _, _, slots, ks, vs = case(10)
    cases.append(("caches as kv_cache[:, 0] and kv_cache[:, 1] of one buffer", (key, value, kv[:, 0], kv[:, 1],
                                                                               slots, ks, vs)))
    # An unaligned key/value start (storage offset 1).
    key, value, kc, vc, slots, ks, vs = case(5)
    kb, vb = torch.empty(key.numel() + 1, dtype=dtype, device=device), torch.empty(value.numel() + 1, dtype=dtype,
                                                                                   device=device)
    kb[1:].copy_(key.flatten())
    vb[1:].copy_(value.flatten())
    cases.append(("unaligned key/value (storage offset 1)", (kb[1:].view(key.shape), vb[1:].view(value.shape), kc,
                                                             vc, slots, ks, vs)))
    return cases


def written_rows(x: torch.Tensor, scale: torch.Tensor, fp8: bool) -> torch.Tensor:
    """What each token's row becomes in the cache, float64 [T, H * D]: x itself, or its exact fp8 rounding of
    x / scale, clamped to +-448 (one rounding, ties to even; NaN kept)."""
    x = x.to(torch.float64).reshape(x.shape[0], x.shape[1] * x.shape[2])
    if not fp8:
        return x
    return round_to_e4m3((x / scale.to(torch.float64).reshape(())).clamp(-FP8_MAX, FP8_MAX))


def targets(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
            slot_mapping: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> list[ScatterTarget]:
    """The two caches as the scatter mode sees them (args as the row got them, caches as they were)."""
    fp8 = key_cache.dtype == FP8
    slots = slot_mapping.to(torch.int64).cpu()
    return [ScatterTarget(name, cache, slots, written_rows(x, s, fp8).to(cache.device), fp8, cache.shape[1])
            for name, cache, x, s in (("key_cache", key_cache, key, k_scale), ("value_cache", value_cache, value,
                                                                                v_scale))]


def oracle(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
           slot_mapping: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> torch.Tensor:
    """cat(key_cache, value_cache) after the writes, float64: each slot of slot_mapping holds its token's row
    (exact, or its exact fp8 rounding for an fp8 cache), every other element what it held."""
    fp8 = key_cache.dtype == FP8
    out = []
    used = slot_mapping >= 0
    for cache, x, scale in ((key_cache, key, k_scale), (value_cache, value, v_scale)):
        flat = cache.to(torch.float64).flatten().clone()
        if flat.numel():
            flat.view(-1, x.shape[1] * x.shape[2])[slot_mapping[used]] = written_rows(x, scale, fp8)[used]
        out.append(flat)
    return torch.cat(out)


def call(fn, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
         slot_mapping: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> torch.Tensor:
    """Run ``fn`` on layout-preserving copies of both caches; return both after the call, float64, flattened
    and concatenated."""
    key_cache, value_cache = copy_for_row(key_cache, "key_cache"), copy_for_row(value_cache, "value_cache")
    result = fn(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    if result is not None:
        raise TypeError(f"reshape_and_cache_flash writes into the caches and returns None, got {type(result).__name__}")
    return torch.cat([key_cache.to(torch.float64).flatten(), value_cache.to(torch.float64).flatten()])


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """T = numel // TOKEN_NUMEL tokens of 8 heads of 128 into a cache of exactly their blocks (16 slots each),
    blocks in shuffled order and offsets in order within a block: many sequences' pages, as a prefill writes
    them. An ideal kernel reads key and value and slot_mapping once and writes each row once."""
    tokens = max(1, numel // TOKEN_NUMEL)
    gen = torch.Generator().manual_seed(tokens)
    num_blocks = -(-tokens // BENCH_BLOCK_SIZE)
    order = torch.randperm(num_blocks, generator=gen)
    slots = (order[:, None] * BENCH_BLOCK_SIZE + torch.arange(BENCH_BLOCK_SIZE)).flatten()[:tokens]
    shape = (tokens, BENCH_HEADS, BENCH_HEAD_SIZE)
    key = torch.empty(shape, dtype=dtype, device=device).uniform_(-2, 2)
    value = torch.empty(shape, dtype=dtype, device=device).uniform_(-2, 2)
    cache_shape = (num_blocks, BENCH_BLOCK_SIZE, BENCH_HEADS, BENCH_HEAD_SIZE)
    key_cache = torch.zeros(cache_shape, dtype=dtype, device=device)
    value_cache = torch.zeros(cache_shape, dtype=dtype, device=device)
    moved = 4 * key.numel() * key.element_size() + tokens * 8
    return CaseArgs((key, value, key_cache, value_cache, slots.to(device), *_scales(1.0, 1.0, device)), {},
                    bytes_moved=moved)


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases,
                      compare=ScatterWrite(targets=targets))
