"""The CUDA row of top_k_top_p_sampling (jit/top_k_top_p_sampling): top_k_top_p_sampling.cu behind the op's
calling convention.

A .cu row normally declares itself on its first line and is called out-first through one of the out rules
(rapid_llm.kernels.registry.out_rules), which make one output like the input. This op returns int64 ids [B] and
takes optional tensors, which no launcher parameter can be, so this wrapper is the row: the op's checks, the ids
allocated (or the caller's out), k as int64 and every optional tensor contiguous (an empty tensor for none),
and the launcher ``top_k_top_p_sampling_launch(out, x, top_k, top_p, temperature, seed_offset, from_logits)``,
built on first use.

Verified on an H100: ``verify("jit/top_k_top_p_sampling")`` passes (the sampling mode), and the GPU tests
(tests/gpu/ops/test_top_k_top_p_sampling.py) hold its ids to the floor's on edge rows (k = 1, k >= V, ties,
zeros, NaN and inf, tiny p, greedy temperatures) at vocabularies 1, 2, 4097 and 131072, strided and unaligned.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling.native import OP, check

SOURCE = Path(__file__).with_name("top_k_top_p_sampling.cu")
LAUNCHER = "top_k_top_p_sampling_launch"
_row: Any = None


def launcher() -> Any:
    """The JIT row of the launcher (built by the JIT toolchain on its first call)."""
    global _row
    if _row is None:
        from rapid_llm.kernels.toolchain.jit_row import JitRow

        _row = JitRow(SOURCE, LAUNCHER, out="none")
    return _row


def top_k_top_p_sampling(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None,
                         seed_offset: torch.Tensor, temperature: torch.Tensor | None = None,
                         from_logits: bool = False, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The floor's contract on CUDA tensors: x at any row stride (another layout is made contiguous first), out
    written in place where given (through a contiguous copy where it is a strided view)."""
    check(x, top_k, top_p, seed_offset, temperature, from_logits, out=out)
    arguments.runs_on(OP, "CUDA", ("cuda",), x)
    batch, vocab = x.shape
    if vocab > 1 and x.stride(1) != 1:
        x = x.contiguous()
    ids = out if out is not None and out.is_contiguous() else torch.empty(batch, dtype=torch.int64, device=x.device)
    none = torch.empty(0, device=x.device)
    k = top_k.to(torch.int64).contiguous() if top_k is not None else none.to(torch.int64)
    p = top_p.contiguous() if top_p is not None else none
    t = temperature.contiguous() if temperature is not None else none
    launcher()(ids, x, k, p, t, seed_offset.contiguous(), from_logits)
    return out.copy_(ids) if out is not None and ids is not out else ids
