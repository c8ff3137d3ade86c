"""A small Llama-style decoder for one decode step: embedding, a few :class:`LlamaLayer`, final norm, LM head, sampler.

    ids [T] -> embedding -> layer 0 .. n-1 (each writes its own paged KV cache at slot_mapping)
      -> fused_add_rms_norm(h, residual) -> LM head -> logits [T, vocab] -> sampler -> next ids [T]

One step of a batch of T decode tokens (T sequences, one token each): every row of the logits is a sequence's
last, so every row is sampled. The sampler is one call, ``K.top_k_top_p_sampling`` unless another is given
(anything with its arguments: ``(x, top_k, top_p, seed_offset, temperature, from_logits) -> ids``); its
randomness is a ``seed_offset`` tensor, so a captured step draws anew once the caller advances the offset. The layers are the in-place form (vLLM's): inside the step x and residual are
intermediates, so a compiled step mutates only its caches, buffers that torch.compile passes as static inputs,
and torch.compile(mode="reduce-overhead") can form its CUDA graphs. Random weights (no downloads), as the layer.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

import rapid_llm.kernels as K
from rapid_llm.models.llama import LlamaConfig, LlamaLayer, init_random_

__all__ = ["LlamaDecoder", "Sampler"]

#: ``(x, top_k, top_p, seed_offset, temperature, from_logits) -> ids [B] int64``: K.top_k_top_p_sampling's call.
Sampler = Callable[..., torch.Tensor]


class LlamaDecoder(torch.nn.Module):
    """``forward(ids, positions, slot_mapping, top_k, top_p, temperature, seed_offset)`` -> next ids [T] int64."""

    def __init__(self, cfg: LlamaConfig, *, layers: int = 2, vocab: int = 512, kv_blocks: int = 8,
                 block_size: int = 16, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 ops: Any = None, sampler: Sampler | None = None) -> None:
        super().__init__()
        if layers < 1 or vocab < 1 or kv_blocks < 1:
            raise ValueError(f"LlamaDecoder: layers, vocab and kv_blocks must be >= 1, got {layers}, {vocab}, "
                             f"{kv_blocks}")
        self.cfg = cfg
        self.ops = K if ops is None else ops
        self.sampler: Sampler = K.top_k_top_p_sampling if sampler is None else sampler
        self.sampler_name = "K.top_k_top_p_sampling" if sampler is None else getattr(sampler, "__name__", repr(sampler))
        self.layers = torch.nn.ModuleList(
            LlamaLayer(cfg, dtype=dtype, device=device, ops=ops, kv_blocks=kv_blocks, block_size=block_size)
            for _ in range(layers))
        self.embed = torch.nn.Parameter(torch.empty(vocab, cfg.hidden, dtype=dtype, device=device),
                                        requires_grad=False)
        self.norm = torch.nn.Parameter(torch.empty(cfg.hidden, dtype=dtype, device=device), requires_grad=False)
        self.lm_head = torch.nn.Parameter(torch.empty(vocab, cfg.hidden, dtype=dtype, device=device),
                                          requires_grad=False)

    @classmethod
    def random(cls, cfg: LlamaConfig = LlamaConfig(), *, seed: int = 0, **kwargs: Any) -> "LlamaDecoder":
        """A decoder with random weights (each layer's as :meth:`LlamaLayer.random` draws them, one seed each)."""
        model = cls(cfg, **kwargs)
        for i, layer in enumerate(model.layers):
            init_random_(layer, seed + i)
        gen = torch.Generator().manual_seed(seed + len(model.layers))
        model.embed.data.copy_(torch.randn(model.embed.shape, generator=gen).to(model.embed.dtype))
        model.norm.data.copy_((1.0 + 0.1 * torch.randn(model.norm.shape, generator=gen)).to(model.norm.dtype))
        model.lm_head.data.copy_((torch.randn(model.lm_head.shape, generator=gen) / cfg.hidden ** 0.5)
                                 .to(model.lm_head.dtype))
        return model

    def logits(self, ids: torch.Tensor, positions: torch.Tensor, slot_mapping: torch.Tensor) -> torch.Tensor:
        """The step up to the LM head: logits [T, vocab] in float32 (each layer writes its cache)."""
        x, residual = F.embedding(ids, self.embed), None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, slot_mapping)
        self.ops.fused_add_rms_norm(x, residual, self.norm, self.cfg.eps)
        return F.linear(x, self.lm_head).float()

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, slot_mapping: torch.Tensor,
                top_k: torch.Tensor | None, top_p: torch.Tensor | None, temperature: torch.Tensor | None,
                seed_offset: torch.Tensor) -> torch.Tensor:
        """One decode step: the next token id of each of the T sequences."""
        return self.sampler(self.logits(ids, positions, slot_mapping), top_k, top_p, seed_offset, temperature,
                            True)
