"""The argument checks every Python row of rotary_embedding shares (the CUDA row's launcher repeats them in C++,
in the same words: a bad input raises the same ValueError whichever row serves it)."""
from __future__ import annotations

from typing import NamedTuple

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.platform import describe, shape_str

OP = "rotary_embedding"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
POSITION_DTYPES = (torch.int64, torch.int32)


class RopeGeometry(NamedTuple):
    """What the checks derive from the arguments."""

    tokens: int
    q_heads: int
    k_heads: int
    rot_dim: int


def _heads(name: str, t: torch.Tensor, head_size: int, tokens: int) -> int:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{OP}: {name} must be a tensor, got {type(t).__name__}")
    if t.dim() not in (2, 3):
        raise ValueError(f"{OP}: {name} must be [T, heads * head_size] or [T, heads, head_size], "
                         f"got {shape_str(t)}")
    if t.shape[0] != tokens:
        raise ValueError(f"{OP}: positions has {tokens} tokens but {name} has {t.shape[0]} (shape {shape_str(t)})")
    if t.dim() == 3:
        if t.shape[2] != head_size:
            raise ValueError(f"{OP}: head_size {head_size} does not match {name}'s last dim (shape {shape_str(t)})")
        return t.shape[1]
    if t.shape[1] % head_size:
        raise ValueError(f"{OP}: head_size {head_size} does not divide {name}'s last dim (shape {shape_str(t)})")
    return t.shape[1] // head_size


def check_args(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int,
               cos_sin_cache: torch.Tensor, is_neox: bool) -> RopeGeometry:
    """Raise ValueError naming the op for anything a kernel would read or write wrongly."""
    if not isinstance(positions, torch.Tensor) or positions.dtype not in POSITION_DTYPES:
        got = describe(positions) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ValueError(f"{OP}: positions must be an int64 or int32 tensor, got {got}")
    if positions.dim() != 1:
        raise ValueError(f"{OP}: positions must be 1-D [T], got {shape_str(positions)}")
    if isinstance(head_size, bool) or not isinstance(head_size, int) or head_size <= 0:
        raise ValueError(f"{OP}: head_size must be a positive int, got {head_size!r}")
    if not isinstance(is_neox, bool):
        raise ValueError(f"{OP}: is_neox must be a bool, got {type(is_neox).__name__}")
    tokens = positions.shape[0]
    q_heads = _heads("q", q, head_size, tokens)
    k_heads = _heads("k", k, head_size, tokens)
    if q.dtype != k.dtype:
        raise ValueError(f"{OP}: q and k dtypes differ: {describe(q)} vs {describe(k)}")
    if q.dtype not in DTYPES:
        raise ValueError(f"{OP}: dtype {q.dtype} is not supported (bf16, fp16, fp32)")
    if not isinstance(cos_sin_cache, torch.Tensor) or cos_sin_cache.dim() != 2:
        got = shape_str(cos_sin_cache) if isinstance(cos_sin_cache, torch.Tensor) else type(cos_sin_cache).__name__
        raise ValueError(f"{OP}: cos_sin_cache must be [max_pos, rot_dim], got {got}")
    if cos_sin_cache.dtype not in (torch.float32, q.dtype):
        raise ValueError(f"{OP}: cos_sin_cache must be fp32 or q's dtype, got {describe(cos_sin_cache)} for q "
                         f"{describe(q)}")
    rot_dim = cos_sin_cache.shape[1]
    if rot_dim <= 0 or rot_dim % 2:
        raise ValueError(f"{OP}: rot_dim (cos_sin_cache's last dim) must be a positive even number, got {rot_dim}")
    if rot_dim > head_size:
        raise ValueError(f"{OP}: rot_dim {rot_dim} exceeds head_size {head_size}")
    devices = {t.device for t in (positions, q, k, cos_sin_cache)}
    if len(devices) != 1:
        raise ValueError(f"{OP}: positions, q, k and cos_sin_cache must be on one device, got "
                         f"{', '.join(sorted(str(d) for d in devices))}")
    a.no_overlap(OP, {"q": q, "k": k}, {"positions": positions, "cos_sin_cache": cos_sin_cache})
    return RopeGeometry(tokens, q_heads, k_heads, rot_dim)
