"""bench_new_op_peers.py's plumbing without a GPU: every op timed through the harness at a small shape, FlashInfer
skipped with its reason; FlashInfer's page table puts each token at its slot; the sampling check's allowed set."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the script's body runs
    spec.loader.exec_module(module)
    return module


def test_cpu_test_times_each_op_s_floor_and_dispatch_a_compiled_floor_and_skips_flashinfer(tmp_path, capsys):
    bench = _load(BENCHMARKS / "bench_new_op_peers.py", "bench_new_op_peers")
    out, table = tmp_path / "peers.json", tmp_path / "peers.txt"
    assert bench.main(["--cpu-test", "--json", str(out), "--table", str(table)]) == 0
    doc = json.loads(out.read_text())
    arms = {(r["op"], r["arm"]) for r in doc["results"]}
    for op in ("reshape_and_cache_flash", "top_k_top_p_sampling", "moe_topk_gate"):
        assert {(op, "native"), (op, "dispatch")} <= arms
    assert ("moe_topk_gate", "compile") in arms  # the compiled floor: the gate's alone on a CPU
    assert ("reshape_and_cache_flash", "copy") in arms
    assert {r["size"] for r in doc["results"] if r["op"] == "top_k_top_p_sampling"} == {"2x512 probs", "2x512 logits"}
    assert "GPU" in doc["skipped"]["flashinfer"] and not doc["errors"]
    assert "moe_topk_gate: T tokens, DeepSeek-V3" in table.read_text()
    assert "flashinfer: no CUDA device" in capsys.readouterr().out


def test_page_table_puts_each_written_token_at_its_slot():
    fip = _load(BENCHMARKS / "peers" / "flashinfer_peer.py", "flashinfer_peer")
    block = 4
    slots = torch.tensor([9, -1, 8, 2, 15, 3, -1, 12])
    t = fip.page_table(slots, block)
    tokens = t["tokens"]
    assert tokens.tolist() == [0, 2, 3, 4, 5, 7]  # padded tokens left out
    # FlashInfer's addressing: page kv_indices[kv_indptr[b] + pos // block], offset pos % block
    b, pos = t["batch_indices"].long(), t["positions"].long()
    page = t["kv_indices"].long()[t["kv_indptr"].long()[b] + pos // block]
    assert (page * block + pos % block).tolist() == slots[tokens].tolist()
    assert t["kv_last_page_len"].tolist() == [block] * t["kv_indices"].numel()


def test_allowed_keeps_the_top_k_then_the_nucleus_ties_inside():
    bench = _load(BENCHMARKS / "bench_new_op_peers.py", "bench_new_op_peers")
    q = torch.tensor([[0.1, 0.4, 0.2, 0.2, 0.1], [0.5, 0.3, 0.1, 0.05, 0.05], [0.2, 0.2, 0.2, 0.2, 0.2]])
    ok = bench.allowed(q, torch.tensor([2, 5, 1]), torch.tensor([0.9, 0.7, 0.5]))
    # row 0: top 2 is 0.4 and a tie of 0.2s (both inside); row 1: 0.5 + 0.3 passes 0.7, so two kept; row 2: all tied
    assert ok.tolist() == [[False, True, True, True, False], [True, True, False, False, False], [True] * 5]
    # joint: p of the whole mass (row 0: 0.4 + 0.2 of 1.0 keeps the 0.2s; a top 1 row stays its top 1)
    joint = bench.allowed(q, torch.tensor([2, 5, 1]), torch.tensor([0.5, 0.7, 0.5]), joint=True)
    assert joint.tolist() == [[False, True, True, True, False], [True, True, False, False, False], [True] * 5]
    # top-k first, the same row: p = 0.5 of the top 2's mass (0.6) is passed by the 0.4 alone
    assert bench.allowed(q[:1], torch.tensor([2]), torch.tensor([0.5])).tolist() == [[False, True, False, False, False]]


class _StandInFlashInfer:
    """FlashInfer's three calls done in torch on a CPU (its addressing, a draw from the allowed set, our floor's
    gate), so the benchmark's FlashInfer arms and their checks run end to end without a GPU."""

    def __init__(self, bench):
        self.sampling = self
        self._bench = bench

    @staticmethod
    def append_paged_kv_cache(key, value, batch_indices, positions, caches, kv_indices, kv_indptr, last_len, layout):
        assert layout == "NHD"
        block = caches[0].shape[1]
        page = kv_indices.long()[kv_indptr.long()[batch_indices.long()] + positions.long() // block]
        for src, cache in zip((key, value), caches):
            cache[page, positions.long() % block] = src

    def _draw(self, x, top_k, top_p, filter_apply_order, deterministic, seed, offset, logits):
        q = torch.softmax(x.double(), dim=1) if logits else x.double()
        ok = self._bench.allowed(q, top_k, top_p, joint=filter_apply_order == "joint")
        gen = torch.Generator().manual_seed(seed)
        return torch.multinomial(ok.double(), 1, generator=gen).squeeze(1).to(torch.int32)

    def top_k_top_p_sampling_from_probs(self, x, top_k, top_p, **kw):
        return self._draw(x, top_k, top_p, logits=False, **kw)

    def top_k_top_p_sampling_from_logits(self, x, top_k, top_p, **kw):
        return self._draw(x, top_k, top_p, logits=True, **kw)


def test_flashinfer_arms_time_and_check_a_stand_in_peer(monkeypatch):
    bench = _load(BENCHMARKS / "bench_new_op_peers.py", "bench_new_op_peers")
    args = bench.argparse.Namespace(budget_s=600.0, repeats=3, peers=["flashinfer"], cpu_test=True, json=None)
    run = bench.Run(args)
    run.vocab, run.sizes = 256, {"cache": (5,), "sampling": (3,), "gate": (2,)}
    fi = _StandInFlashInfer(bench)
    floor_gate = bench.native_function("moe_topk_gate")

    def gate(k, groups, topk_groups):
        def call(logits, bias, weights, ids):
            w, i = floor_gate(logits, k, "sigmoid", True, bias.float(), groups, topk_groups)
            weights.copy_(w)
            ids.copy_(i)
        return call

    monkeypatch.setattr(bench.fip, "dsv3_gate", gate)
    cpu = torch.device("cpu")
    gate_args = []
    for name in ("cache", "sampling", "gate"):
        cases, _ours, theirs = bench.BENCHES[name]
        floor = bench.native_function(bench.OPS[name])
        for size, case in cases(run, cpu):
            if name == "gate":  # as the check saw them: the timing after it may refill the inputs
                gate_args.append(tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args))
            theirs(run, size, case, fi, floor)
    assert not run.doc["errors"], run.doc["errors"]
    checks = {(c["op"], c["arm"]): c for c in run.doc["checks"]}
    assert checks[("reshape_and_cache_flash", "flashinfer")]["caches_equal_to_floor"] is True
    for order in ("top_k_first", "joint"):
        c = checks[("top_k_top_p_sampling", f"flashinfer {order}")]
        assert c["outside_top_k_top_p"] == 0 and c["draws"] == 3 * bench.CHECK_SEEDS
    # FlashInfer takes the bias in the logits' dtype, so a token whose experts a bf16 bias reorders differs from
    # the floor's (fp32 bias) for a real reason: the check must count exactly those
    (logits, k, scoring, renorm, bias, groups, topk_groups), = gate_args
    _, rounded = floor_gate(logits, k, scoring, renorm, bias.to(logits.dtype).float(), groups, topk_groups)
    _, exact = floor_gate(logits, k, scoring, renorm, bias, groups, topk_groups)
    same_sets = (rounded.sort(dim=1).values == exact.sort(dim=1).values).all(dim=1)
    assert checks[("moe_topk_gate", "flashinfer")]["tokens_same_ids"] == int(same_sets.sum())
    timed = {(r["op"], r["arm"]) for r in run.doc["results"]}
    assert {("reshape_and_cache_flash", "flashinfer"), ("top_k_top_p_sampling", "flashinfer joint"),
            ("moe_topk_gate", "flashinfer")} <= timed
