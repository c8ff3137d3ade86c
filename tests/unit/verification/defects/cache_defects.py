"""Plain-torch rows of reshape_and_cache_flash, each with one defect the scatter mode
(rapid_llm.kernels.verification.scatter_mode) must name, and their fixed twin.

Registered as ``external`` CPU rows by tests/ops/test_reshape_and_cache_flash.py. Each has the op's signature;
the docstring says what is wrong and what names it.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops.cache.reshape_and_cache_flash.native import (check_args, quantise,
                                                                       reshape_and_cache_flash)


def _write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, *, skip_padding: bool,
           shift: int) -> None:
    g = check_args(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    keep = slot_mapping >= 0 if skip_padding else torch.ones_like(slot_mapping, dtype=torch.bool)
    slots = slot_mapping[keep] + shift
    inside = slots < g.num_slots
    slots = slots[inside]
    for x, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        rows = (quantise(x, scale) if g.fp8 else x)[keep][inside]
        cache.view(torch.uint8 if g.fp8 else cache.dtype)[slots // g.block_size, slots % g.block_size] = \
            rows.view(torch.uint8) if g.fp8 else rows


def reshape_and_cache_flash_fixed(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale) -> None:
    """The fixed twin: the native floor."""
    reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)


def reshape_and_cache_flash_writes_padding(key, value, key_cache, value_cache, slot_mapping, k_scale,
                                           v_scale) -> None:
    """DEFECT: padded tokens are written too. Their slot -1 becomes block -1 // block_size = -1 and offset
    -1 % block_size = block_size - 1: a Python index, the last slot of the cache, which now holds a padded
    token's row. Named ``wrote_padding``."""
    _write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, skip_padding=False, shift=0)


def reshape_and_cache_flash_writes_neighbour(key, value, key_cache, value_cache, slot_mapping, k_scale,
                                             v_scale) -> None:
    """DEFECT: an off-by-one offset: each token lands in the slot after its own (none past the cache's end), so
    its own slot keeps its old row and a neighbour the mapping does not name changes. Named
    ``wrote_outside_slots``, with the first such slot."""
    _write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, skip_padding=True, shift=1)
