"""top_k_top_p_sampling on a GPU: every row (native, Triton, CUDA) verified by the sampling mode, the rows' ids
equal to the floor's at FlashInfer's bench shape (batch 128, vocabulary 131072), and the CUDA and Triton rows
under a CUDA graph drawing anew when the offset is advanced in place. The CPU checks are
tests/ops/test_top_k_top_p_sampling.py. The CUDA row ships golden unverified: this file is where it first runs,
and a pass here is what lets it be recorded verified.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling import reference as R
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify

pytestmark = pytest.mark.gpu

ROWS = ("native/top_k_top_p_sampling", "triton/top_k_top_p_sampling", "jit/top_k_top_p_sampling")
CUDA = torch.device("cuda")


def _runnable(name: str):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    row = spec.get_row(name)
    avail = row.probe(CUDA)
    if not avail:
        pytest.skip(f"{name}: {avail.reason}")
    return row.load()


def _case(batch: int, vocab: int, dtype: torch.dtype, logits: bool) -> tuple:
    g = torch.Generator().manual_seed(batch + vocab)
    x = torch.randn(batch, vocab, generator=g) * 3.0
    x = x if logits else x.softmax(-1)
    k = torch.randint(0, 200, (batch,), generator=g, dtype=torch.int32)
    p = torch.rand(batch, generator=g) * 0.5 + 0.5
    t = torch.rand(batch, generator=g) + 0.3 if logits else None
    args = R.sampling_args(x.to(dtype), k, p, torch.tensor([11, 3]), t, logits)
    return tuple(a.to(CUDA) if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("name", ROWS)
def test_every_row_passes_the_sampling_mode_on_cuda(name):
    _runnable(name)
    report = verify(name, device=CUDA, record=False)
    assert report.passed, str(report)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float32))
@pytest.mark.parametrize("name", ROWS[1:])
def test_the_rows_draw_the_floors_ids_at_batch_128_vocab_131072(name, dtype):
    fn = _runnable(name)
    floor = spec.get_row(ROWS[0]).load()
    args = _case(128, 131072, dtype, logits=False)
    assert torch.equal(fn(*args), floor(*args))  # from probabilities: the same integers, the same ids
    args = _case(128, 131072, dtype, logits=True)
    same = (fn(*args) == floor(*args)).double().mean()
    assert same >= 0.99, same  # from logits exp rounds otherwise: a draw moves only at a boundary


@pytest.mark.parametrize("name", ROWS[1:])
def test_a_captured_graph_draws_anew_when_the_offset_advances(name):
    fn = _runnable(name)
    x, k, p, so, t, logits = _case(32, 4097, torch.float32, logits=True)
    out = torch.empty(32, dtype=torch.int64, device=CUDA)
    fn(x, k, p, so, t, logits, out=out)  # warm-up: builds and loads the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(x, k, p, so, t, logits, out=out)
    for offset in (3, 4, 5):
        so[1] = offset
        graph.replay()
        torch.cuda.synchronize()
        want = fn(x, k, p, torch.tensor([11, offset], device=CUDA), t, logits)
        assert torch.equal(out, want)
