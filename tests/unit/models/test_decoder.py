"""One decode step (rapid_llm.models.decoder: layers with their caches, final norm, LM head, sampler) on a CPU:
eager and fullgraph-traced alike, with the plain-torch stand-in sampler and with K.top_k_top_p_sampling where the
op is declared; the step writes no graph input but its caches (static), so reduce-overhead can graph it."""
from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.models.decoder import LlamaDecoder
from rapid_llm.models.graph_checks import input_mutations
from rapid_llm.models.llama import LlamaConfig
from rapid_llm.models.sampling import default_sampler, standin_top_k_top_p_sampling

VOCAB, LAYERS, KV_BLOCKS, BLOCK = 96, 2, 4, 16


def _sampler(name: str):
    if name == "standin":
        return standin_top_k_top_p_sampling
    if "top_k_top_p_sampling" not in K.all_ops():
        pytest.skip("K.top_k_top_p_sampling is not declared in this checkout")
    return K.top_k_top_p_sampling


def _step_args(tokens: int = 6) -> tuple:
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (tokens,), generator=gen)
    positions = torch.randint(0, 64, (tokens,), generator=gen)
    slots = torch.randperm(KV_BLOCKS * BLOCK, generator=gen)[:tokens]
    top_k = torch.tensor([0, 1, 5, 50, 200, 3][:tokens])
    top_p = torch.tensor([1.0, 0.9, 0.5, 0.95, 0.0, 0.8][:tokens])
    temperature = torch.tensor([1.0, 0.7, 0.0, 1.3, 1.0, 0.5][:tokens])
    return ids, positions, slots, top_k, top_p, temperature, torch.tensor([11, 0])


@pytest.mark.parametrize("sampler", ["standin", "K"])
def test_decode_step_traces_whole_matches_eager_and_writes_only_its_caches(sampler):
    fn = _sampler(sampler)
    eager = LlamaDecoder.random(LlamaConfig(), layers=LAYERS, vocab=VOCAB, kv_blocks=KV_BLOCKS, sampler=fn)
    traced_model = LlamaDecoder.random(LlamaConfig(), layers=LAYERS, vocab=VOCAB, kv_blocks=KV_BLOCKS, sampler=fn)
    args = _step_args()
    expected = eager(*args)
    assert expected.dtype == torch.int64 and expected.shape == (6,) and bool(((0 <= expected) & (expected < VOCAB)).all())
    traced = input_mutations(traced_model, *args)
    assert torch.equal(traced.result, expected)
    (graph,) = traced.graphs
    assert graph.blocking == ()
    assert len(graph.mutated) == 2 * LAYERS and all("cache" in n for n in graph.mutated)
    for a, b in zip(eager.layers, traced_model.layers):
        assert torch.equal(a.key_cache, b.key_cache) and torch.equal(a.value_cache, b.value_cache)
        assert a.key_cache.view(-1, a.cfg.kv_size)[args[2]].abs().sum() > 0  # each layer wrote its slots


def test_the_default_sampler_is_the_op_where_it_is_declared():
    name, fn = default_sampler()
    declared = "top_k_top_p_sampling" in K.all_ops()
    assert (fn is getattr(K, "top_k_top_p_sampling")) if declared else (fn is standin_top_k_top_p_sampling), name


def test_the_stand_in_keeps_the_op_s_rules():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=gen)
    top = logits.argmax(-1)
    seed = torch.tensor([1, 0])
    # temperature <= 0 is greedy; k = 1 is greedy; p = 0 keeps the first token only
    assert torch.equal(standin_top_k_top_p_sampling(logits, None, None, seed, torch.zeros(4), True), top)
    assert torch.equal(standin_top_k_top_p_sampling(logits, torch.ones(4, dtype=torch.int64), None, seed, None, True), top)
    assert torch.equal(standin_top_k_top_p_sampling(logits, None, torch.zeros(4), seed, None, True), top)
    # draws stay in the top k, vary with the offset, and repeat for the same (seed, offset)
    k = torch.full((4,), 3)
    allowed = logits.topk(3, dim=-1).indices
    draws = torch.stack([standin_top_k_top_p_sampling(logits, k, None, torch.tensor([1, off]), None, True)
                         for off in range(40)])
    assert bool((draws[..., None] == allowed[None]).any(-1).all())
    assert len(set(draws[:, 0].tolist())) > 1
    assert torch.equal(draws[7], standin_top_k_top_p_sampling(logits, k, None, torch.tensor([1, 7]), None, True))
