"""One decode step (rapid_llm.models.decoder: layers with their caches, final norm, LM head, K.top_k_top_p_sampling)
on a CPU: eager and fullgraph-traced alike; the step writes no graph input but its caches (static), so
reduce-overhead can graph it; the sampler is one call a caller can swap."""
from __future__ import annotations

import torch

import rapid_llm.kernels as K
from rapid_llm.models.decoder import LlamaDecoder
from rapid_llm.models.graph_checks import input_mutations
from rapid_llm.models.llama import LlamaConfig

VOCAB, LAYERS, KV_BLOCKS, BLOCK = 96, 2, 4, 16


def _step_args(tokens: int = 6) -> tuple:
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (tokens,), generator=gen)
    positions = torch.randint(0, 64, (tokens,), generator=gen)
    slots = torch.randperm(KV_BLOCKS * BLOCK, generator=gen)[:tokens]
    top_k = torch.tensor([0, 1, 5, 50, 200, 3][:tokens])
    top_p = torch.tensor([1.0, 0.9, 0.5, 0.95, 0.0, 0.8][:tokens])
    temperature = torch.tensor([1.0, 0.7, 0.0, 1.3, 1.0, 0.5][:tokens])
    return ids, positions, slots, top_k, top_p, temperature, torch.tensor([11, 0])


def test_decode_step_traces_whole_matches_eager_and_writes_only_its_caches():
    eager = LlamaDecoder.random(LlamaConfig(), layers=LAYERS, vocab=VOCAB, kv_blocks=KV_BLOCKS)
    traced_model = LlamaDecoder.random(LlamaConfig(), layers=LAYERS, vocab=VOCAB, kv_blocks=KV_BLOCKS)
    assert eager.sampler is K.top_k_top_p_sampling
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
    # greedy rows (temperature 0, or k = 1) take the argmax of the step's logits
    logits = eager.logits(*args[:3])
    for row in (1, 2):
        assert expected[row] == logits[row].argmax()


def test_the_sampler_is_one_call_a_caller_can_swap():
    greedy = lambda x, top_k, top_p, seed_offset, temperature, from_logits: x.argmax(-1)  # noqa: E731
    model = LlamaDecoder.random(LlamaConfig(), layers=1, vocab=VOCAB, kv_blocks=KV_BLOCKS, sampler=greedy)
    args = _step_args()
    assert torch.equal(model(*args), model.logits(*args[:3]).argmax(-1))
