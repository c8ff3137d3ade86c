"""torch.compile(mode="reduce-overhead") really forms CUDA graphs for the decoder layer's graphable form and for the
decode step, and skips them for the in-place layer (the skip the watch must see), with outputs as eager's.

The watch (rapid_llm.models.graph_checks.CudagraphWatch) reads Inductor's cudagraph-skip counter, its "skipping
cudagraphs due to ..." log records and the graphs the cudagraph trees recorded. The CPU half of the question, which
graph inputs each form writes, is tests/unit/models/test_llama.py's.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.models.decoder import LlamaDecoder
from rapid_llm.models.graph_checks import CudagraphWatch
from rapid_llm.models.llama import LlamaConfig, LlamaLayer
from tests.reference import assert_close_to_ref

pytestmark = pytest.mark.gpu

CFG = LlamaConfig(hidden=256, heads=8, kv_heads=2, head_dim=32, intermediate=512)
KV_BLOCKS, BLOCK, TOKENS = 8, 16, 9
#: Compiled against eager in bf16: Inductor may order the matmuls' and attention's sums otherwise.
ULPS = 8
CALLS = 4  # reduce-overhead warms up on the first call, records on the second, replays after


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    positions = torch.randint(0, CFG.max_positions, (TOKENS,), generator=gen).cuda()
    x = torch.randn(TOKENS, CFG.hidden, generator=gen).to("cuda", dtype)
    residual = torch.randn(TOKENS, CFG.hidden, generator=gen).to("cuda", dtype)
    slots = torch.randperm(KV_BLOCKS * BLOCK, generator=gen)[:TOKENS].cuda()
    slots[3] = -1
    return positions, x, residual, slots


def _layer(inplace: bool, dtype: torch.dtype) -> LlamaLayer:
    return LlamaLayer.random(CFG, dtype=dtype, device="cuda", kv_blocks=KV_BLOCKS, block_size=BLOCK,
                             inplace=inplace)


def _compiled_calls(model: torch.nn.Module, args: tuple, copies: bool) -> tuple[CudagraphWatch, tuple]:
    """CALLS calls of model under reduce-overhead (fresh input copies each, where the model writes them); the last
    call's results, cloned (a replay's outputs are overwritten by the next)."""
    torch._dynamo.reset()  # fresh compile caches and cudagraph trees
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True, dynamic=False)
    with CudagraphWatch() as watch:
        for _ in range(CALLS):
            got = compiled(*[a.clone() if copies and torch.is_tensor(a) else a for a in args])
        got = tuple(t.clone() for t in (got if isinstance(got, tuple) else (got,)))
        torch.cuda.synchronize()
    return watch, got


def test_the_graphable_layer_forms_cuda_graphs_and_matches_eager():
    dtype = torch.bfloat16
    args = _inputs(dtype)
    eager, compiled = _layer(False, dtype), _layer(False, dtype)
    expected = eager(*args)
    watch, got = _compiled_calls(compiled, args, copies=False)
    assert watch.formed, watch.summary()
    assert watch.graphs is None or watch.graphs >= 1, watch.summary()
    for what, g, e in zip(("out", "residual", "key_cache", "value_cache"),
                          (*got, compiled.key_cache, compiled.value_cache),
                          (*expected, eager.key_cache, eager.value_cache)):
        assert_close_to_ref(g, e.double(), f"reduce-overhead layer, {what}", ulps=ULPS,
                            magnitude=e.double().abs().max().expand(e.shape))


def test_the_in_place_layer_is_skipped_for_its_mutated_inputs_and_the_watch_sees_it():
    watch, _ = _compiled_calls(_layer(True, torch.bfloat16), _inputs(torch.bfloat16), copies=True)
    assert not watch.formed and watch.skips >= 1, watch.summary()
    assert any("mutated inputs" in r for r in watch.reasons) or not watch.reasons, watch.reasons


def test_the_decode_step_forms_cuda_graphs_and_samples_as_eager():
    make = lambda: LlamaDecoder.random(CFG, layers=2, vocab=1000, kv_blocks=KV_BLOCKS, block_size=BLOCK,  # noqa: E731
                                       dtype=torch.float32, device="cuda")
    positions, _, _, slots = _inputs(torch.float32)
    gen = torch.Generator().manual_seed(2)
    args = (torch.randint(0, 1000, (TOKENS,), generator=gen).cuda(), positions, slots,
            torch.full((TOKENS,), 50, device="cuda"), torch.full((TOKENS,), 0.9, device="cuda"),
            torch.ones(TOKENS, device="cuda"), torch.tensor([5, 0], device="cuda"))
    eager, compiled = make(), make()
    expected = eager(*args)
    watch, (got,) = _compiled_calls(compiled, args, copies=False)
    assert watch.formed, watch.summary()
    assert torch.equal(got, expected), f"{got.tolist()} != {expected.tolist()}"
    for a, b in zip(eager.layers, compiled.layers):
        torch.testing.assert_close(a.key_cache, b.key_cache)
