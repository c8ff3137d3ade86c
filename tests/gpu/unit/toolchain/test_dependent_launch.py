"""Programmatic dependent launch on a GPU: chains of dependent kernels in a CUDA graph equal plain launches.

A dependent kernel may start before the kernel ahead of it on the stream has finished; its in-kernel wait is
what keeps it from reading that kernel's output early. So each case chains a CUDA row on its own output,
eight calls back to back in one CUDA graph (where the launches overlap most), and requires the result to
equal, bit for bit, the same chain run eagerly as plain launches. (A per-tensor dynamic scaled_fp8_quant call
is such a chain by itself: clear, amax, quantise, scale, each kernel reading what the one before wrote.)
The switch, and the waits in the shipped sources, are checked on CPU in tests/unit/toolchain/test_dependent_launch.py.
"""
from __future__ import annotations

from typing import Callable

import pytest
import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.toolchain.fastpath.binding import set_dependent_launch

pytestmark = pytest.mark.gpu

CHAIN = 8


def _chains(tokens: int) -> dict[str, Callable[[], torch.Tensor]]:
    """op -> a chain of CHAIN calls of its CUDA row, each reading what the one before wrote (fresh inputs)."""
    gen = torch.Generator().manual_seed(tokens)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to("cuda", torch.bfloat16)

    x, r, w = rand(tokens, 4096), rand(tokens, 4096), 1 + 0.1 * rand(4096)
    q, k = rand(tokens, 32 * 128), rand(tokens, 8 * 128)
    positions = torch.randint(0, 4096, (tokens,), generator=gen).cuda()
    cache = torch.randn(4096, 128, generator=gen).cuda()
    gate_up = rand(tokens, 2 ** CHAIN * 16)
    rows = {op: spec.get_row(f"jit/{op}").load()
            for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding")}

    def rms_norm() -> torch.Tensor:
        y = x
        for _ in range(CHAIN):
            y = rows["rms_norm"](y, w, 1e-5)
        return y

    def fused_add_rms_norm() -> torch.Tensor:
        xx, rr = x.clone(), r.clone()
        for _ in range(CHAIN):
            rows["fused_add_rms_norm"](xx, rr, w, 1e-5)
        return torch.cat([xx, rr])

    def silu_and_mul() -> torch.Tensor:
        y = gate_up
        for _ in range(CHAIN):  # halves the last dim each time
            y = rows["silu_and_mul"](y)
        return y

    def rotary_embedding() -> torch.Tensor:
        qq, kk = q.clone(), k.clone()
        for _ in range(CHAIN):
            rows["rotary_embedding"](positions, qq, kk, 128, cache, True)
        return torch.cat([qq, kk], dim=1)

    heads = 32
    v, v_b = rand(tokens, heads, 128), rand(tokens, heads, 128)
    lse, lse_b = torch.randn(heads, tokens, generator=gen).cuda(), torch.randn(heads, tokens, generator=gen).cuda()
    merge = spec.get_row("jit/merge_attn_states").load()
    quant = spec.get_row("jit/scaled_fp8_quant").load()

    def merge_attn_states() -> torch.Tensor:
        a, a_lse = v, lse
        for _ in range(CHAIN):  # each merge's output is the next one's first state
            out, out_lse = torch.empty_like(a), torch.empty_like(a_lse)
            merge(out, out_lse, a, a_lse, v_b, lse_b)
            a, a_lse = out, out_lse
        return torch.cat([a.flatten().float(), a_lse.flatten()])

    def scaled_fp8_quant() -> torch.Tensor:
        parts = []
        for i in range(CHAIN):  # per tensor, dynamic: clear, amax, quantise, scale, four dependent kernels a call
            out, scales = torch.empty(tokens, 4096, dtype=torch.float8_e4m3fn, device="cuda"), x.new_empty(1).float()
            quant(out, x if i % 2 == 0 else r, scales, False)
            parts += [out.view(torch.uint8).flatten().float(), scales]
        return torch.cat(parts)

    return {f.__name__: f for f in (rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding,
                                    merge_attn_states, scaled_fp8_quant)}


@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding",
                                "merge_attn_states", "scaled_fp8_quant"])
@pytest.mark.parametrize("tokens", [1, 16, 1024, 16384])
def test_a_chain_of_dependent_launches_in_a_graph_equals_plain_launches(op, tokens):
    chain = _chains(tokens)[op]
    before = set_dependent_launch(False)
    try:
        expected = chain()
        set_dependent_launch(True)
        chain()  # warm every kernel outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = chain()
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(got, expected), f"{op} T={tokens}: a dependent chain in a graph differs"
        assert torch.equal(chain(), expected), f"{op} T={tokens}: a dependent chain called eagerly differs"
    finally:
        set_dependent_launch(before)
