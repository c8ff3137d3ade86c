"""The decoder layer with its KV-cache write (rapid_llm.models.llama) against a float64 plain-torch reference of
the same computation, cache contents included; its two forms (in place, graphable) traced whole, and which graph
inputs each writes: reduce-overhead's "mutated inputs" check, answered on a CPU (rapid_llm.models.graph_checks).
Whether Inductor really forms CUDA graphs is tests/gpu/unit/models/test_cudagraphs.py's question."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rapid_llm.models.graph_checks import input_mutations
from rapid_llm.models.llama import LlamaConfig, LlamaLayer, native_ops
from tests.reference import assert_close_to_ref

CFG = LlamaConfig()
KV_BLOCKS, BLOCK = 4, 16
#: A layer's worth of fp32 sums (lengths up to 96) against float64, judged at each tensor's largest magnitude.
ULPS = 64


def _inputs(tokens: int = 7, seed: int = 1) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, CFG.max_positions, (tokens,), generator=gen)
    x = torch.randn(tokens, CFG.hidden, generator=gen)
    residual = torch.randn(tokens, CFG.hidden, generator=gen)
    slots = torch.randperm(KV_BLOCKS * BLOCK, generator=gen)[:tokens]
    slots[2] = -1  # a padded token: not written
    return positions, x, residual, slots


def _layer(ops=None, inplace: bool = True) -> LlamaLayer:
    layer = LlamaLayer.random(CFG, kv_blocks=KV_BLOCKS, block_size=BLOCK, ops=ops, inplace=inplace)
    gen = torch.Generator().manual_seed(5)  # caches full of values, so a write to the wrong slot shows
    layer.key_cache.copy_(torch.randn(layer.key_cache.shape, generator=gen))
    layer.value_cache.copy_(torch.randn(layer.value_cache.shape, generator=gen))
    return layer


def _rms(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + CFG.eps) * w


def _rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox rotation of [T, heads, D] by [T, D/2] angles."""
    a, b = t.chunk(2, dim=-1)
    return torch.cat([a * cos[:, None] - b * sin[:, None], b * cos[:, None] + a * sin[:, None]], dim=-1)


def reference(layer: LlamaLayer, positions, x, residual, slots) -> tuple[torch.Tensor, ...]:
    """(out, residual, key_cache, value_cache) in float64, the layer's computation in plain torch."""
    w = {n: p.double() for n, p in layer.named_parameters()}
    tokens, heads, kv_heads, d = x.shape[0], CFG.heads, CFG.kv_heads, CFG.head_dim
    x = x.double()
    residual = x if residual is None else x + residual.double()
    qkv = _rms(residual, w["input_norm"]) @ w["qkv"].T
    q, k, v = qkv.split([CFG.q_size, CFG.kv_size, CFG.kv_size], dim=-1)
    cos, sin = layer.cos_sin_cache.double()[positions].chunk(2, dim=-1)
    q, k = _rope(q.reshape(tokens, heads, d), cos, sin), _rope(k.reshape(tokens, kv_heads, d), cos, sin)
    v = v.reshape(tokens, kv_heads, d)
    key_cache, value_cache = layer.key_cache.double().clone(), layer.value_cache.double().clone()
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            key_cache.view(-1, kv_heads, d)[s], value_cache.view(-1, kv_heads, d)[s] = k[t], v[t]
    group = heads // kv_heads
    scores = torch.einsum("thd,shd->hts", q, k.repeat_interleave(group, dim=1)) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(tokens, tokens, dtype=torch.bool).triu(1), -math.inf)
    attn = torch.einsum("hts,shd->thd", scores.softmax(-1), v.repeat_interleave(group, dim=1))
    residual = attn.reshape(tokens, CFG.q_size) @ w["o_proj"].T + residual
    gate, up = (_rms(residual, w["post_norm"]) @ w["gate_up"].T).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ w["down"].T, residual, key_cache, value_cache


def _assert_matches(got: tuple, expected: tuple, what: str) -> None:
    for name, g, e in zip(("out", "residual", "key_cache", "value_cache"), got, expected):
        assert_close_to_ref(g, e, f"{what}: {name}", ulps=ULPS, magnitude=e.abs().max().expand(e.shape))


@pytest.mark.parametrize("first", [True, False], ids=["first_layer", "chained"])
def test_layer_with_its_cache_write_matches_a_float64_reference(first):
    layer = _layer()
    positions, x, residual, slots = _inputs()
    expected = reference(layer, positions, x, None if first else residual, slots)
    before = layer.key_cache.clone(), layer.value_cache.clone()
    out, res = layer(positions, x.clone(), None if first else residual.clone(), slots)
    _assert_matches((out, res, layer.key_cache, layer.value_cache), expected, "K layer")
    written = torch.zeros(KV_BLOCKS * BLOCK, dtype=torch.bool)
    written[slots[slots >= 0]] = True
    for cache, old in zip((layer.key_cache, layer.value_cache), before):  # every other slot, bit for bit as it was
        assert torch.equal(cache.view(-1, CFG.kv_size)[~written], old.view(-1, CFG.kv_size)[~written])
        assert not torch.equal(cache.view(-1, CFG.kv_size)[written], old.view(-1, CFG.kv_size)[written])


def test_the_two_forms_compute_the_same_and_only_the_in_place_one_writes_its_inputs():
    positions, x, residual, slots = _inputs()
    results = {}
    for inplace in (True, False):
        layer = _layer(inplace=inplace)
        args = (x.clone(), residual.clone())
        out, res = layer(positions, *args, slots)
        results[inplace] = (out, res, layer.key_cache, layer.value_cache)
        untouched = torch.equal(args[0], x) and torch.equal(args[1], residual)
        assert untouched is not inplace, f"inplace={inplace}: inputs untouched={untouched}"
    for a, b in zip(results[True], results[False]):
        assert torch.equal(a, b)


def test_native_ops_layer_matches_k_layer():
    positions, x, residual, slots = _inputs()
    ours, native = _layer(), _layer(ops=native_ops())
    for a, b in zip(ours(positions, x.clone(), residual.clone(), slots), native(positions, x.clone(), residual.clone(),
                                                                               slots)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(ours.key_cache, native.key_cache, rtol=0, atol=0)


def test_a_layer_with_a_cache_needs_slots():
    positions, x, residual, _ = _inputs()
    with pytest.raises(ValueError, match="slot_mapping"):
        _layer()(positions, x, residual)


@pytest.mark.parametrize("inplace", [True, False], ids=["in_place", "graphable"])
def test_layer_compiles_whole_matches_eager_and_writes_only_static_inputs_in_the_graphable_form(inplace):
    """fullgraph (0 graph breaks), the same results and cache as eager, and the written graph inputs: the in-place
    form writes x and residual, inputs of the graph, which is Inductor's "skipping cudagraphs due to mutated inputs
    (2 instances)" on a GPU; the graphable form writes only its caches, buffers, which are static inputs."""
    positions, x, residual, slots = _inputs()
    eager, compiled = _layer(inplace=inplace), _layer(inplace=inplace)
    expected = eager(positions, x.clone(), residual.clone(), slots)
    traced = input_mutations(compiled, positions, x.clone(), residual.clone(), slots)
    for a, b in zip((*traced.result, compiled.key_cache, compiled.value_cache),
                    (*expected, eager.key_cache, eager.value_cache)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    (graph,) = traced.graphs
    assert {n for n in graph.mutated if "cache" in n} == {"l_self_buffers_key_cache_", "l_self_buffers_value_cache_"}
    assert sorted(graph.blocking) == (["l_residual_", "l_x_"] if inplace else [])
