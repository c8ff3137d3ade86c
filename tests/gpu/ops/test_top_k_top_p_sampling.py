"""top_k_top_p_sampling on a GPU: every row (native, Triton, CUDA) verified by the sampling mode, the rows' ids
equal to the floor's at FlashInfer's bench shape (batch 128, vocabulary 131072), the CUDA row's ids equal to the
floor's on edge rows (every path of its kernel) at several vocabularies, dtypes and layouts, and the CUDA and
Triton rows under a CUDA graph drawing anew when the offset is advanced in place. The CPU checks are
tests/ops/test_top_k_top_p_sampling.py. The CUDA row ships golden unverified: this file is where it first runs,
and a pass here is what lets it be recorded verified.
"""
from __future__ import annotations

import shutil
from pathlib import Path

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


# ------------------------------------------------------------------ the CUDA row's paths, against the floor

#: One token; two (one 16-byte group); a tail past the groups (4097: odd rows of a contiguous fp32 tensor start
#: unaligned); FlashInfer's vocabulary. Each row's k, p and kind cycle with coprime periods, so 180 rows meet
#: each kind with many (k, p): k = 1 (one pass and a walk), a k-th weight inside a tie group, k off every way;
#: p = 0 and tiny (the first token alone), a cut inside a tie group, p off (1, NaN, 2.5).
EDGE_VOCABS = (1, 2, 4097, 131072)
EDGE_ROWS = 180
_KS = (0, 1, 2, 3, -1, 50, 7, -5, 4096)  # with vocab - 1, vocab and vocab // 2 below
_PS = (1.0, 0.9, 0.5, 0.0, 1e-9, 0.3, float("nan"), 2.5, 0.75, 0.99)


def _edge_k_p(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    ks = torch.tensor(_KS + (vocab - 1, vocab, vocab // 2))
    return ks[torch.arange(EDGE_ROWS) % len(ks)], torch.tensor(_PS)[torch.arange(EDGE_ROWS) % len(_PS)]


def _edge_probs(vocab: int, g: torch.Generator) -> torch.Tensor:
    """Rows of eight kinds (row i is kind i % 8): random; a few levels (long tie groups); all equal; all zero; one
    spike at the last id; NaN; +inf at two ids over 0.5s and negatives; one 1 over weights below 2^-32."""
    x = (torch.randn(EDGE_ROWS, vocab, generator=g) * 3.0).softmax(-1)
    kind = torch.arange(EDGE_ROWS) % 8
    levels = (x / x.amax(dim=1, keepdim=True) * 4).round() / 4 + 0.25
    spike = torch.zeros(vocab).index_fill_(0, torch.tensor([vocab - 1]), 1.0)
    infs = torch.full((vocab,), 0.5)
    infs[::7] = -1.0
    infs[torch.tensor([vocab // 3, vocab - 1])] = float("inf")
    tiny = torch.full((vocab,), 1e-12)
    tiny[0] = 1.0
    for k, row in ((1, None), (2, torch.full((vocab,), 1.0 / vocab)), (3, torch.zeros(vocab)), (4, spike),
                   (5, torch.full((vocab,), float("nan"))), (6, infs), (7, tiny)):
        x[kind == k] = levels[kind == k] if row is None else row
    return x


def _layout(x: torch.Tensor, how: str) -> torch.Tensor:
    """x on the GPU: contiguous; rows at a longer stride; or every row one element past a 16-byte boundary."""
    x = x.to(CUDA)
    if how == "contiguous":
        return x
    wide = torch.zeros(x.shape[0], x.shape[1] + 8, dtype=x.dtype, device=CUDA)
    start = 0 if how == "strided" else 1
    wide[:, start:start + x.shape[1]] = x
    return wide[:, start:start + x.shape[1]]


@pytest.mark.parametrize("how", ("contiguous", "strided", "unaligned"))
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float32))
@pytest.mark.parametrize("vocab", EDGE_VOCABS)
def test_the_cuda_row_draws_the_floors_ids_on_edge_rows(vocab, dtype, how):
    fn = _runnable("jit/top_k_top_p_sampling")
    floor = spec.get_row(ROWS[0]).load()
    g = torch.Generator().manual_seed(vocab)
    x = _layout(_edge_probs(vocab, g).to(dtype), how)
    k, p = (t.to(CUDA) for t in _edge_k_p(vocab))
    for offset in (0, 1):
        so = torch.tensor([5, offset], device=CUDA)
        for args in ((x, k, p, so), (x, None, p, so), (x, k, None, so), (x, None, None, so)):
            got, want = fn(*args), floor(*args)
            assert torch.equal(got, want), (args[1] is not None, args[2] is not None, (got != want).nonzero()[:8])
    one = (x[:1], k[1:2], p[1:2], so)  # a batch of one row (its own row stride)
    assert torch.equal(fn(*one), floor(*one))


@pytest.mark.parametrize("vocab", EDGE_VOCABS)
def test_the_cuda_row_draws_the_floors_ids_from_logits_on_edge_rows(vocab):
    """From logits the GPU's exp rounds otherwise in torch and in the kernel, so a draw may move at a boundary:
    greedy rows (T <= 0 or NaN), rows of -inf and NaN logits and infinite temperatures match exactly, the rest
    nearly all."""
    fn = _runnable("jit/top_k_top_p_sampling")
    floor = spec.get_row(ROWS[0]).load()
    g = torch.Generator().manual_seed(vocab + 1)
    x = torch.randn(EDGE_ROWS, vocab, generator=g) * 3.0
    kind = torch.arange(EDGE_ROWS) % 6
    x[kind == 1] = (x[kind == 1] * 2).round() / 2  # ties
    x[kind == 2] = float("-inf")
    x[kind == 3, ::2] = float("nan")
    x[kind == 4, ::5] = float("inf")
    x[kind == 5] = 0.25  # all equal
    temps = torch.tensor([1.0, 0.5, 0.0, -1.0, float("nan"), 1e6, float("inf"), 0.7, 2.0, 1.3, 0.9])
    t = temps[torch.arange(EDGE_ROWS) % len(temps)]
    k, p = _edge_k_p(vocab)
    args = tuple(a.to(CUDA) for a in (x, k, p, torch.tensor([9, 4]), t)) + (True,)
    got, want = fn(*args), floor(*args)
    exact = ~(t > 0) | torch.isinf(t) | (kind == 2) | (kind == 5)
    assert torch.equal(got[exact.to(CUDA)], want[exact.to(CUDA)])
    same = (got == want).double().mean()
    assert same >= 0.97, same


# ------------------------------------------------------------------ the CUDA kernel's build for an H100


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                    reason="compiling the CUDA row needs g++ and the CUDA toolkit (nvcc)")
def test_the_cuda_kernel_compiles_for_sm90_without_spills(tmp_path):
    """ptxas's report for an H100: every dtype's kernel keeps its state in registers (a spill inside a pass over
    the row would cost a local-memory round trip per token) and fits a block of 512 threads on one SM. Here, not
    in CPU CI: the kernel takes about 12 s of nvcc an arch, and CPU CI compiles it for the oldest arch already
    (tests/unit/toolchain/test_cu_compile.py)."""
    from rapid_llm.kernels.toolchain.buildfacts import parse_ptxas
    from rapid_llm.kernels.toolchain.fastpath import builder

    cu = Path(R.__file__).with_name("top_k_top_p_sampling.cu")
    host_obj, launched = builder.host_pass(cu, tmp_path)
    code = builder.device_pass(cu, launched, "9.0", tmp_path, ("-O3",))
    facts = parse_ptxas(code.log)
    assert len(facts) == 3, code.log  # bf16, fp16, fp32
    for f in facts.values():
        assert f.spills == 0 and f.stack_frame == 0, f
        assert 0 < f.registers <= 65536 // 512 and f.smem_static <= 48 * 1024, f
