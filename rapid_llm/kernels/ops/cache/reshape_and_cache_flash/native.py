"""The floor for reshape_and_cache_flash: plain torch, runs on every device, dtype and layout.

The contract every row keeps (vLLM's ``reshape_and_cache_flash``, the flash layout of the paged cache):

- ``key`` and ``value`` [T, H, D] (bf16, fp16 or fp32, one dtype, any strides: often slices of a fused qkv
  projection); ``key_cache`` and ``value_cache`` [num_blocks, block_size, H, D], any strides (vLLM's
  ``kv_cache[:, 0]`` and ``kv_cache[:, 1]`` of one [num_blocks, 2, block_size, H, D] buffer).
- ``slot_mapping`` int64 [T]: token t goes to slot s = slot_mapping[t], i.e. block s // block_size, offset
  s % block_size. A slot of -1 is padding: that token is not written. Nothing else of either cache changes.
- Caches in key's dtype hold an exact copy. A float8_e4m3fn cache (vLLM's ``kv_cache_dtype="fp8"``, told
  here by the cache's dtype) holds ``fp8(clamp(x / scale, -448, 448))`` with ``k_scale`` for the key and
  ``v_scale`` for the value (float32, one element each, positive and finite: no row reads them back to
  check), rounded to nearest even, NaN kept NaN (saturating: an infinity lands on +-448). Rows divide in
  fp32 and round once more, so a value may sit one fp8 step from the exact rounding; verify allows that step
  and counts it. The scales are required in every form (ignored by a cache in key's dtype): a CUDA
  launcher has no optional arguments, and a call must mean the same whichever row answers it.
- A slot outside [-1, num_blocks * block_size) is an error. On CPU tensors the checks read the slots and
  refuse it; on CUDA reading them would cost a host sync per call (and break graph capture), so every row
  there leaves such a token unwritten (never writing outside the caches).
- Slots are unique (vLLM's contract: one slot per token of a sequence). Two tokens with one slot are not
  refused (finding them is a sort per call): the slot ends up holding one of their rows, unspecified which,
  and verify's cases never have them.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.platform import describe

OP = "reshape_and_cache_flash"
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: Same-size integer types: every write is a copy of bits (an fp8 cache included), so index_put needs no fp8 kernel.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


class CacheGeometry(NamedTuple):
    """What the checks derive from a call."""

    tokens: int
    heads: int
    head_size: int
    block_size: int
    num_slots: int
    fp8: bool


#: Where the checks read the slots' values (arguments.reads_values_on): nowhere else would it cost no sync.
VALUES_READ_ON = ("cpu",)


def _cache_values_known(t: torch.Tensor) -> bool:
    """Whether the slots can be read without a device sync or a trace: a real CPU tensor, eagerly."""
    if t.device.type not in VALUES_READ_ON or torch.compiler.is_compiling():
        return False
    from torch._subclasses.fake_tensor import is_fake

    return not is_fake(t)


def check_args(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               slot_mapping: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> CacheGeometry:
    """Raise TypeError or ValueError naming the op and the argument for anything a row would misread or
    misplace; return the call's geometry."""
    names = ("key", "value", "key_cache", "value_cache", "slot_mapping", "k_scale", "v_scale")
    for name, t in zip(names, (key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)):
        a.tensor(OP, name, t)
    if key.dim() != 3:
        raise ValueError(f"{OP}: key must be [T, H, D], got {describe(key)}")
    a.dtype_in(OP, "key", key, DTYPES)
    if value.shape != key.shape or value.dtype != key.dtype:
        raise ValueError(f"{OP}: value must have key's shape and dtype, got {describe(value)} for key {describe(key)}")
    if key_cache.dim() != 4:
        raise ValueError(f"{OP}: key_cache must be [num_blocks, block_size, H, D], got {describe(key_cache)}")
    if key_cache.dtype not in (key.dtype, FP8):
        raise ValueError(f"{OP}: key_cache must be key's dtype or float8_e4m3fn, got {describe(key_cache)} for key "
                         f"{describe(key)}")
    if value_cache.shape != key_cache.shape or value_cache.dtype != key_cache.dtype:
        raise ValueError(f"{OP}: value_cache must have key_cache's shape and dtype, got {describe(value_cache)} for "
                         f"key_cache {describe(key_cache)}")
    tokens, heads, head_size = key.shape
    num_blocks, block_size = key_cache.shape[0], key_cache.shape[1]
    if tuple(key_cache.shape[2:]) != (heads, head_size):
        raise ValueError(f"{OP}: key_cache's heads and head size must be key's [{heads}, {head_size}], got "
                         f"{describe(key_cache)}")
    if block_size < 1:
        raise ValueError(f"{OP}: key_cache's block_size must be >= 1, got {describe(key_cache)}")
    if slot_mapping.dtype != torch.int64 or slot_mapping.dim() != 1 or slot_mapping.shape[0] != tokens:
        raise ValueError(f"{OP}: slot_mapping must be int64 [T] with T = {tokens} (key's tokens), got "
                         f"{describe(slot_mapping)}")
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s.dtype != torch.float32 or s.numel() != 1:
            raise ValueError(f"{OP}: {name} must be a float32 tensor of one element, got {describe(s)}")
    a.one_device(OP, key=key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping,
                 k_scale=k_scale, v_scale=v_scale)
    a.no_overlap(OP, {"key_cache": key_cache, "value_cache": value_cache},
                 {"key": key, "value": value, "slot_mapping": slot_mapping, "k_scale": k_scale, "v_scale": v_scale})
    num_slots = num_blocks * block_size
    if tokens and _cache_values_known(slot_mapping):
        _check_slots(slot_mapping, num_slots, num_blocks, block_size)
    return CacheGeometry(tokens, heads, head_size, block_size, num_slots, key_cache.dtype == FP8)


def _check_slots(slot_mapping: torch.Tensor, num_slots: int, num_blocks: int, block_size: int) -> None:
    """Every slot in [-1, num_slots) (CPU tensors only: see the module docstring)."""
    low, high = int(slot_mapping.min()), int(slot_mapping.max())
    if low < -1 or high >= num_slots:
        bad = low if low < -1 else high
        raise ValueError(f"{OP}: slot_mapping holds slot {bad}, outside [-1, {num_slots}) "
                         f"({num_blocks} blocks of {block_size}; -1 marks a padded token)")


def quantise(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp8(clamp(x / scale, -448, 448)) in fp32 math (NaN kept NaN): what an fp8 cache holds for x."""
    q = x.float() / scale.float().reshape(())
    return q.clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.element_size()])


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor,
                            v_scale: torch.Tensor) -> None:
    """Write each token's key and value into the paged caches at its slot (-1: padding, skipped); in place on
    key_cache and value_cache, returns None. The contract: this module's docstring.

    No host sync (so a CUDA graph can capture it): a token that is not written (padding, or a slot out of
    range on CUDA) is sent to the slot of the first written token with that token's own row, a second write
    of the same bytes; with no written token at all, to slot 0 with slot 0's own bytes.
    """
    g = check_args(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    if g.tokens == 0 or g.num_slots == 0 or g.heads * g.head_size == 0:
        return None
    valid = (slot_mapping >= 0) & (slot_mapping < g.num_slots)
    first = valid.to(torch.int32).argmax().reshape(1)  # the first written token (0 when none is); a 1-d index
    any_valid = valid.index_select(0, first)               # never becomes a host int, traced or not
    slots = torch.where(valid, slot_mapping, torch.where(any_valid, slot_mapping.index_select(0, first), 0))
    for x, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        rows = _bits(quantise(x, scale) if g.fp8 else x)  # [T, H, D], the cache's bits
        stand_in = torch.where(any_valid[:, None, None], rows.index_select(0, first), _bits(cache)[0, :1])
        rows = torch.where(valid[:, None, None], rows, stand_in)
        bits = _bits(cache)
        if cache.shape[0] == 1 or cache.stride(0) == cache.shape[1] * cache.stride(1):
            # block and offset merge into one slot dim: index_copy_, about half index_put_'s time on a CPU
            bits.view(g.num_slots, g.heads, g.head_size).index_copy_(0, slots, rows)
        else:  # blocks further apart than their slots (the halves of one kv buffer): index by block and offset
            bits.index_put_((slots // g.block_size, slots % g.block_size), rows)
    return None


def check(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
          slot_mapping: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """reshape_and_cache_flash's argument checks, every path's: key_cache and value_cache are written."""
    check_args(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)


reshape_and_cache_flash.check = a.reads_values_on(check, VALUES_READ_ON)
