"""moe_topk_gate on a GPU: every row (native, Triton, CUDA) verified by the routing mode, DeepSeek-V3's and
Mixtral's gates at decode and prefill token counts, exact ties, and the CUDA row under a CUDA graph. The CPU
checks are tests/ops/test_moe_topk_gate.py. The CUDA row ships golden unverified: this file is where it first
runs, and a pass here is what lets it be recorded verified.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.ops.moe.moe_topk_gate import reference as R
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify
from tests.ops.test_moe_topk_gate import grouped_topk

pytestmark = pytest.mark.gpu

ROWS = ("native/moe_topk_gate", "triton/moe_topk_gate", "jit/moe_topk_gate")
CUDA = torch.device("cuda")


def _runnable(name: str):
    row = spec.get_row(name)
    avail = row.probe(CUDA)
    if not avail:
        pytest.skip(f"{name}: {avail.reason}")
    return row.load()


@pytest.mark.parametrize("name", ROWS)
def test_every_row_passes_the_routing_mode_on_cuda(name):
    _runnable(name)
    report = verify(name, device=CUDA, record=False)
    assert report.passed, str(report)


@pytest.mark.parametrize("tokens", (1, 7, 128, 4096))
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float32))
@pytest.mark.parametrize("name", ROWS)
def test_deepseek_v3_gate_passes_the_routing_mode_at_decode_and_prefill_sizes(name, dtype, tokens):
    fn = _runnable(name)
    args = R.dsv3(tokens, dtype, CUDA, torch.Generator().manual_seed(tokens))
    weights, ids = fn(*args)
    got = torch.cat([weights.double().flatten(), ids.double().flatten()])
    counts: dict = {}
    errs = R.REFERENCE.compare.errors(got, R.oracle(*[a.double() if isinstance(a, torch.Tensor) else a
                                                      for a in args]), args, counts)
    assert int((errs.diff > errs.allowed).sum()) == 0, R.REFERENCE.compare.summary(counts)
    ref_ids, _ = grouped_topk(args[0].float(), args[1], args[4], args[5], args[6])
    assert (ids.long() == ref_ids).float().mean() > 0.99  # torch.topk differs only where scores tie or nearly


@pytest.mark.parametrize("name", ROWS)
def test_ties_go_to_the_lower_id_on_cuda(name):
    fn = _runnable(name)
    flat = torch.zeros(64, 256, device=CUDA)
    weights, ids = fn(flat, 8, "sigmoid", True, torch.zeros(256, device=CUDA), 8, 4)
    assert ids.tolist() == [list(range(8))] * 64


def test_the_cuda_row_replays_in_a_cuda_graph():
    fn = _runnable("jit/moe_topk_gate")
    args = R.dsv3(16, torch.bfloat16, CUDA, torch.Generator().manual_seed(0))
    out_w = torch.empty(16, 8, device=CUDA)
    out_i = torch.empty(16, 8, dtype=torch.int32, device=CUDA)
    fn(*args, out_weights=out_w, out_ids=out_i)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args, out_weights=out_w, out_ids=out_i)
    args[0].copy_(torch.randn(16, 256, device=CUDA).to(args[0].dtype))
    graph.replay()
    torch.cuda.synchronize()
    want_w, want_i = spec.get_row("native/moe_topk_gate").load()(*args)
    assert torch.equal(out_i, want_i)
