"""How a token-wise LLM op's reference sizes become inputs: one rule for every op that maps a size to
[tokens, hidden] (rms_norm, fused_add_rms_norm, scaled_fp8_quant), so their cases line up.

Not an op group (a plain module beside the groups, which the registry does not import as one).
"""
from __future__ import annotations

import torch

#: Llama-3-8B's hidden size: the bench shapes of the token-wise ops.
BENCH_HIDDEN = 4096


def tokens_hidden(n: int) -> tuple[int, int]:
    """The [tokens, hidden] a reference size maps to: a multiple of BENCH_HIDDEN past twice it is that many
    tokens of BENCH_HIDDEN, any other size one token of hidden ``n`` (4097 a tail past every vector width),
    and empty is zero tokens of a small hidden size."""
    if n <= 0:
        return 0, 8
    if n > 2 * BENCH_HIDDEN and n % BENCH_HIDDEN == 0:
        return n // BENCH_HIDDEN, BENCH_HIDDEN
    return 1, n


def randn(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator,
          scale: float = 1.0) -> torch.Tensor:
    """Normal values times ``scale``, drawn in fp32 on the CPU generator, then cast and moved."""
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype=dtype, device=device)
