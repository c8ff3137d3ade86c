"""A Llama-style decoder layer whose every custom step is a ``K.<op>`` (vLLM's layer, one token batch).

    x -> rms_norm -> qkv proj -> rotary_embedding(q, k) -> [reshape_and_cache_flash(k, v)]
      -> causal SDPA (GQA) -> o proj -> fused_add_rms_norm(., residual) -> gate/up proj -> silu_and_mul -> down proj

``forward(positions, x, residual, slot_mapping)`` returns ``(out, residual)``; with ``residual=None`` (the first
layer) the input norm is ``rms_norm`` and the residual is ``x``, otherwise ``fused_add_rms_norm``, as vLLM chains
layers. A layer built with ``kv_blocks > 0`` owns a paged KV cache (``key_cache`` / ``value_cache`` buffers,
[kv_blocks, block_size, kv_heads, head_dim], the flash layout) and writes each token's rotated key and its value
at ``slot_mapping[t]`` (-1: padding) after rope. Attention stays the causal SDPA over the step's own tokens: it
does not read the cache back (the project has no paged-attention op yet), so the cache write is a real step with
its real shapes and strides (k and v are slices of the fused qkv), and the layer's output does not depend on what
earlier steps wrote.

Two forms of the same computation (``inplace``): vLLM's (the default) writes ``x`` and ``residual`` in place,
as fused_add_rms_norm does; the graphable form (``inplace=False``) first copies what it will write, so the layer
never mutates its inputs. Why both: torch.compile(mode="reduce-overhead") skips CUDA graphs for a graph that
mutates an input that is not static ("mutated inputs"), and a compiled layer's x and residual are its inputs.
Inside a compiled model of several layers (rapid_llm.models.decoder) they are intermediates, and the in-place
form costs nothing; the caches are buffers, static inputs, whose mutation CUDA-graph trees allow. The copies are
the smallest change that lets a lone layer graph: the ops keep their in-place API, and Inductor writes the
copies as pointwise kernels (2 x T x hidden elements read and written) and hands them to fused_add_rms_norm as
intermediates it may write; a functional fused_add_rms_norm (new output tensors) would save those copies only
with new rows for every backend.

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

__all__ = ["LAYER_OPS", "LlamaConfig", "LlamaLayer", "LLAMA3_8B", "init_random_", "native_ops", "rope_cache"]


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


#: The ops the layer calls (``LlamaLayer(ops=...)`` takes anything that has them).
LAYER_OPS = ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul", "reshape_and_cache_flash")


def native_ops() -> SimpleNamespace:
    """The layer's ops as their native floors (plain torch): the layer a user would write without rapid_llm."""
    ops = LAYER_OPS
    return SimpleNamespace(**{op: K.get_row(f"native/{op}").load() for op in ops})


def rope_cache(cfg: LlamaConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """The [max_positions, head_dim] fp32 cos|sin cache rotary_embedding reads (neox, full rotary)."""
    inv_freq = cfg.rope_base ** (-torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
    angles = torch.arange(cfg.max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(device=device, dtype=torch.float32)


class LlamaLayer(torch.nn.Module):
    """One decoder layer; ``K.rms_norm``, ``K.rotary_embedding``, ``K.reshape_and_cache_flash`` (with a cache),
    ``K.fused_add_rms_norm``, ``K.silu_and_mul``."""

    def __init__(self, cfg: LlamaConfig, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", ops: Any = None, kv_blocks: int = 0, block_size: int = 16,
                 inplace: bool = True) -> None:
        super().__init__()
        if kv_blocks < 0 or block_size < 1:
            raise ValueError(f"LlamaLayer: kv_blocks must be >= 0 and block_size >= 1, got {kv_blocks}, {block_size}")
        self.cfg = cfg
        self.ops = K if ops is None else ops  # anything with LAYER_OPS: K, or native_ops() (the floors)
        self.inplace = inplace

        def weight(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)

        self.input_norm = weight(cfg.hidden)
        self.qkv = weight(cfg.q_size + 2 * cfg.kv_size, cfg.hidden)
        self.o_proj = weight(cfg.hidden, cfg.q_size)
        self.post_norm = weight(cfg.hidden)
        self.gate_up = weight(2 * cfg.intermediate, cfg.hidden)
        self.down = weight(cfg.hidden, cfg.intermediate)
        self.register_buffer("cos_sin_cache", rope_cache(cfg, device), persistent=False)
        self.has_cache = kv_blocks > 0
        if self.has_cache:  # buffers: torch.compile passes them as static inputs, whose writes CUDA graphs keep
            shape = (kv_blocks, block_size, cfg.kv_heads, cfg.head_dim)
            self.register_buffer("key_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
            self.register_buffer("value_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
            ones = torch.ones(1, dtype=torch.float32, device=device)  # read only by an fp8 cache
            self.register_buffer("k_scale", ones, persistent=False)
            self.register_buffer("v_scale", ones.clone(), persistent=False)

    @classmethod
    def random(cls, cfg: LlamaConfig = LlamaConfig(), *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu", seed: int = 0, ops: Any = None, kv_blocks: int = 0,
               block_size: int = 16, inplace: bool = True) -> "LlamaLayer":
        """A layer with random weights scaled so activations stay O(1) through the layer."""
        layer = cls(cfg, dtype=dtype, device=device, ops=ops, kv_blocks=kv_blocks, block_size=block_size,
                    inplace=inplace)
        init_random_(layer, seed)
        return layer

    def forward(self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None = None,
                slot_mapping: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, hidden] at ``positions`` [T] -> (out [T, hidden], residual); with ``inplace`` (the default) x and
        residual are written in place. ``slot_mapping`` [T] int64: each token's cache slot (a layer with a cache
        needs it)."""
        cfg, ops = self.cfg, self.ops
        if self.has_cache and slot_mapping is None:
            raise ValueError("LlamaLayer: a layer with a KV cache needs slot_mapping (int64 [T], -1 for padding)")
        if not self.inplace:  # the graphable form: write copies, never the inputs
            x = x.clone()
            residual = None if residual is None else residual.clone()
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
        if self.has_cache:  # key and value as [T, kv_heads, head_dim] views of qkv (token stride: qkv's row)
            ops.reshape_and_cache_flash(k.view(tokens, cfg.kv_heads, cfg.head_dim),
                                        v.view(tokens, cfg.kv_heads, cfg.head_dim), self.key_cache,
                                        self.value_cache, slot_mapping, self.k_scale, self.v_scale)
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


def init_random_(module: torch.nn.Module, seed: int = 0) -> None:
    """Random weights in place, scaled so activations stay O(1): norm weights (1-D) around 1, both signs of
    deviation; matrices N(0, 1 / fan_in)."""
    gen = torch.Generator().manual_seed(seed)
    for _, p in module.named_parameters():
        if p.dim() == 1:
            values = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
        else:
            values = torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5
        p.data.copy_(values.to(p.dtype))
