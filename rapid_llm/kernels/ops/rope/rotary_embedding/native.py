"""The floor for rotary_embedding: plain torch, runs on every device and layout."""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops.rope.rotary_embedding.checks import check_args


def rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    """Rotate q and k in place by the angles of each token's position (vLLM's rotary_embedding); returns None.

    positions: int64 or int32 [T], each in [0, max_pos). q: [T, Hq * head_size] or [T, Hq, head_size];
    k likewise with Hk heads (Hk may differ from Hq), same dtype (bf16, fp16, fp32); any strides.
    cos_sin_cache: [max_pos, rot_dim], cos in its first rot_dim/2 columns and sin in the rest, fp32 or
    q's dtype; rot_dim even and <= head_size. The first rot_dim elements of each head are rotated, the
    rest pass through untouched. is_neox pairs element i with i + rot_dim/2 (GPT-NeoX, Llama); else
    2i with 2i+1 (GPT-J).

    Numerics, every row: with c, s the cache values converted to fp32 and x, y a pair converted to fp32,
    x' = x*c - y*s and y' = y*c + x*s, each product rounded to fp32, then the sum (no fused multiply-add),
    then rounded once to q's dtype. Rows agree bit for bit where the hardware rounds the same way.

    Positions outside [0, max_pos) are an error: here torch's indexing raises (on CUDA, a device-side
    assert); the fast rows, which cannot check without a sync, leave that token unchanged and never read
    outside the cache.
    """
    _, _, _, rot_dim = check_args(positions, q, k, head_size, cos_sin_cache, is_neox)
    half = rot_dim // 2
    cos_sin = cos_sin_cache.index_select(0, positions).float()
    cos, sin = cos_sin[:, None, :half], cos_sin[:, None, half:]  # [T, 1, half]: broadcast over heads
    for t in (q, k):
        heads = t if t.dim() == 3 else t.unflatten(-1, (-1, head_size))  # a view for any strides
        rot = heads[..., :rot_dim]
        x, y = (rot[..., :half], rot[..., half:]) if is_neox else (rot[..., 0::2], rot[..., 1::2])
        xf, yf = x.float(), y.float()  # for fp32 these are x and y themselves: both results are computed first
        x_new = xf * cos - yf * sin
        y_new = yf * cos + xf * sin
        x.copy_(x_new)
        y.copy_(y_new)
    return None


def check(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int, cos_sin_cache: torch.Tensor,
          is_neox: bool) -> None:
    """rotary_embedding's argument checks, every path's (checks.py): q and k are written in place, so neither
    may share memory with the other or with positions and the cache."""
    check_args(positions, q, k, head_size, cos_sin_cache, is_neox)


rotary_embedding.check = check
