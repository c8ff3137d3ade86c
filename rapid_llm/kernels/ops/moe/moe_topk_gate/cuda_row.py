"""The CUDA row of moe_topk_gate (jit/moe_topk_gate): moe_topk_gate.cu behind the op's calling convention.

A .cu row normally declares itself on its first line and is called out-first through one of the out rules
(rapid_llm.kernels.registry.out_rules), which make one output like the input. This op returns two outputs of
other dtypes (fp32 weights, int32 ids) and takes a string and an optional tensor, which no launcher
parameter can be, so this wrapper is the row: the op's checks, the outputs allocated (or the caller's
out_weights / out_ids), and the launcher ``moe_topk_gate_launch(weights, ids, logits, bias, k, sigmoid,
renormalize, num_groups, topk_groups)`` (bias: an empty tensor for none), built on first use.

Verified on an H100 (the routing mode: 0 rows whose ids differ from the oracle's, in every dtype); CPU CI
compiles it for the oldest supported arch and the GPU suite for every one (tests/unit/toolchain/test_cu_compile.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rapid_llm.kernels.ops import arguments
from rapid_llm.kernels.ops.moe.moe_topk_gate.native import OP, check

SOURCE = Path(__file__).with_name("moe_topk_gate.cu")
LAUNCHER = "moe_topk_gate_launch"
_row: Any = None


def launcher() -> Any:
    """The JIT row of the launcher (built by the JIT toolchain on its first call)."""
    global _row
    if _row is None:
        from rapid_llm.kernels.toolchain.jit_row import JitRow

        _row = JitRow(SOURCE, LAUNCHER, out="none")
    return _row


def moe_topk_gate(logits: torch.Tensor, k: int, scoring: str = "softmax", renormalize: bool = True,
                  bias: torch.Tensor | None = None, num_groups: int = 1, topk_groups: int = 1, *,
                  out_weights: torch.Tensor | None = None,
                  out_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The floor's contract on CUDA tensors: logits at any row stride (another layout is made contiguous first),
    outputs written in place where given (through a contiguous copy where they are strided views)."""
    check(logits, k, scoring, renormalize, bias, num_groups, topk_groups, out_weights=out_weights, out_ids=out_ids)
    arguments.runs_on(OP, "CUDA", ("cuda",), logits)
    tokens, experts = logits.shape
    if experts > 1 and logits.stride(1) != 1:
        logits = logits.contiguous()
    weights = out_weights if out_weights is not None and out_weights.is_contiguous() else \
        torch.empty((tokens, k), dtype=torch.float32, device=logits.device)
    ids = out_ids if out_ids is not None and out_ids.is_contiguous() else \
        torch.empty((tokens, k), dtype=torch.int32, device=logits.device)
    b = bias if bias is not None else torch.empty(0, dtype=torch.float32, device=logits.device)
    launcher()(weights, ids, logits, b.contiguous(), k, scoring == "sigmoid", renormalize, num_groups, topk_groups)
    if out_weights is not None and weights is not out_weights:
        weights = out_weights.copy_(weights)
    if out_ids is not None and ids is not out_ids:
        ids = out_ids.copy_(ids)
    return weights, ids
