"""A Llama-style decoder layer whose every custom step is a ``K.<op>`` (vLLM's layer, one token batch).

    x -> rms_norm -> qkv proj -> rotary_embedding(q, k) -> causal SDPA (GQA) -> o proj
      -> fused_add_rms_norm(., residual) -> gate/up proj -> silu_and_mul -> down proj

``forward(positions, x, residual)`` returns ``(out, residual)``; with ``residual=None`` (the first layer) the
input norm is ``rms_norm`` and the residual is ``x``, otherwise ``fused_add_rms_norm``, as vLLM chains layers.
Weights are random (:meth:`LlamaLayer.random`): the layer exists to compile, check and time the ops in their
real order and shapes, not to be a model. It imports nothing from the benchmarks and runs on any device the
ops' rows serve.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

import rapid_llm.kernels as K

__all__ = ["LlamaConfig", "LlamaLayer", "LLAMA3_8B", "native_ops", "rope_cache"]


@dataclass(frozen=True)
class LlamaConfig:
    """Shapes of one layer (the defaults are tiny: a test's, not a model's)."""

    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate: int = 96
    max_positions: int = 256
    eps: float = 1e-6
    rope_base: float = 10000.0

    @property
    def q_size(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim


#: One layer of Llama-3-8B (bf16 weights: 436 MiB, far past any L2).
LLAMA3_8B = LlamaConfig(hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336, max_positions=32768,
                        eps=1e-5, rope_base=500000.0)


def native_ops() -> SimpleNamespace:
    """The four ops as their native floors (plain torch): the layer a user would write without rapid_llm."""
    ops = ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul")
    return SimpleNamespace(**{op: K.get_row(f"native/{op}").load() for op in ops})


def rope_cache(cfg: LlamaConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """The [max_positions, head_dim] fp32 cos|sin cache rotary_embedding reads (neox, full rotary)."""
    inv_freq = cfg.rope_base ** (-torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
    angles = torch.arange(cfg.max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(device=device, dtype=torch.float32)


class LlamaLayer(torch.nn.Module):
    """One decoder layer; ``K.rms_norm``, ``K.rotary_embedding``, ``K.fused_add_rms_norm``, ``K.silu_and_mul``."""

    def __init__(self, cfg: LlamaConfig, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", ops: Any = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.ops = K if ops is None else ops  # anything with the four ops: K, or native_ops() (the floors)

        def weight(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)

        self.input_norm = weight(cfg.hidden)
        self.qkv = weight(cfg.q_size + 2 * cfg.kv_size, cfg.hidden)
        self.o_proj = weight(cfg.hidden, cfg.q_size)
        self.post_norm = weight(cfg.hidden)
        self.gate_up = weight(2 * cfg.intermediate, cfg.hidden)
        self.down = weight(cfg.hidden, cfg.intermediate)
        self.register_buffer("cos_sin_cache", rope_cache(cfg, device), persistent=False)

    @classmethod
    def random(cls, cfg: LlamaConfig = LlamaConfig(), *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu", seed: int = 0, ops: Any = None) -> "LlamaLayer":
        """A layer with random weights scaled so activations stay O(1) through the layer."""
        layer = cls(cfg, dtype=dtype, device=device, ops=ops)
        gen = torch.Generator().manual_seed(seed)
        for name, p in layer.named_parameters():
            if p.dim() == 1:  # norm weights around 1, both signs of deviation
                values = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
            else:
                values = torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5
            p.data.copy_(values.to(dtype))
        return layer

    def forward(self, positions: torch.Tensor, x: torch.Tensor,
                residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, hidden] at ``positions`` [T] -> (out [T, hidden], residual); x and residual are written in place."""
        cfg, ops = self.cfg, self.ops
        if residual is None:
            residual = x
            h = ops.rms_norm(x, self.input_norm, cfg.eps)
        else:
            ops.fused_add_rms_norm(x, residual, self.input_norm, cfg.eps)
            h = x
        qkv = F.linear(h, self.qkv)
        q, k, v = qkv.split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        ops.rotary_embedding(positions, q, k, cfg.head_dim, self.cos_sin_cache, True)  # in place on qkv's views
        tokens = x.shape[0]
        # [1, heads, T, head_dim]: SDPA's fused (flash, cuDNN) kernels take 4-D inputs only; 3-D ones run the
        # math path, which materialises the T x T scores (what a serving engine never does).
        attn = F.scaled_dot_product_attention(
            q.view(1, tokens, cfg.heads, cfg.head_dim).transpose(1, 2),
            k.view(1, tokens, cfg.kv_heads, cfg.head_dim).transpose(1, 2),
            v.reshape(1, tokens, cfg.kv_heads, cfg.head_dim).transpose(1, 2),
            is_causal=True, enable_gqa=True)
        o = F.linear(attn.transpose(1, 2).reshape(tokens, cfg.q_size), self.o_proj)
        ops.fused_add_rms_norm(o, residual, self.post_norm, cfg.eps)
        return F.linear(ops.silu_and_mul(F.linear(o, self.gate_up)), self.down), residual
