"""The CUDA rows jit/rms_norm and jit/fused_add_rms_norm on a GPU: the launchers' checks raise without leaving a CUDA
error behind, both kernel paths (16-byte vectors, and the scalar two-pass fallback) and the launch shapes past one
wave match the oracle, and a captured graph replays. Their build on CPU and their
numerics against the oracle are in tests/ops/test_rms_norm.py and tests/contract/test_rows.py.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.registry import spec
from tests.ops.test_rms_norm import FUSED, RMS, ULPS, launcher
from tests.reference import assert_close_to_ref, oracle

pytestmark = pytest.mark.gpu


def cuda_randn(*shape, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(dtype=dtype, device="cuda")


def assert_graph_replay_matches_the_oracle(rms, label: str) -> None:
    """``rms`` (an rms_norm row's call) captured into a CUDA graph, replayed on new input: the oracle's answer."""
    x, w = cuda_randn(64, 4096), cuda_randn(4096)
    out = torch.empty_like(x)
    rms(x, w, 1e-6, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rms(x, w, 1e-6, out=out)
    x.copy_(cuda_randn(64, 4096, seed=4))
    graph.replay()
    torch.cuda.synchronize()
    assert_close_to_ref(out, oracle("rms_norm")(x.cpu().double(), w.cpu().double()), f"replayed {label}",
                        ulps=ULPS[torch.bfloat16])


@pytest.fixture(scope="module")
def rows():
    from rapid_llm.kernels.toolchain import jit

    avail = jit.available()
    if not avail:
        pytest.skip(f"JIT toolchain unavailable: {avail.reason}")
    return spec.get_row(RMS).load(), spec.get_row(FUSED).load()


def _x():
    return cuda_randn(4, 64)


def _w():
    return cuda_randn(64, seed=1)


#: (row, the launcher's arguments, the message): tensors are made on the GPU when a case runs.
BAD_CALLS = [
    (RMS, lambda: (torch.empty_like(_x()), _x(), cuda_randn(63), 1e-6), r"^rms_norm: weight must be \[64\]"),
    (RMS, lambda: (torch.empty_like(_x()), _x(), _w().float(), 1e-6), r"^rms_norm: weight must have x's dtype"),
    (RMS, lambda: (cuda_randn(4, 32), _x(), _w(), 1e-6), r"^rms_norm: out must match x's shape and dtype"),
    (RMS, lambda: (cuda_randn(64, 4).t(), _x(), _w(), 1e-6),
     r"^rms_norm: out must have a contiguous last dim and one row stride"),
    (RMS, lambda: (torch.empty_like(_x()), _x(), _w().cpu(), 1e-6), r"^rms_norm: CUDA tensors only"),
    (RMS, lambda: (_x().double(), _x().double(), _w().double(), 1e-6),
     r"^rms_norm: dtype fp64 is not supported \(supported: bf16, fp16, fp32\)$"),
    (FUSED, lambda: (_x(), cuda_randn(4, 32), _w(), 1e-6), r"^fused_add_rms_norm: residual must match x's shape"),
    (FUSED, lambda: (_x(), _x().half(), _w(), 1e-6), r"^fused_add_rms_norm: residual must match x's shape"),
    (FUSED, lambda: (_x(), _x(), cuda_randn(8), 1e-6), r"^fused_add_rms_norm: weight must be \[64\]"),
]


@pytest.mark.parametrize("row, make, match", BAD_CALLS)
def test_bad_inputs_raise_without_cuda_error_state(rows, row, make, match):
    with pytest.raises(ValueError, match=match):
        launcher(row)(*make())
    torch.cuda.synchronize()  # no sticky error was left behind
    assert torch.isfinite(rows[0](_x(), _w(), 1e-6)).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("hidden", [8, 128, 1000, 4096, 4104, 16384, 20000])
def test_vector_and_scalar_paths_agree_with_the_oracle(rows, dtype, hidden):
    """An aligned x takes the vector path where hidden allows; the same data one element into its storage
    takes the scalar path; both match the oracle."""
    rms, fused = rows
    x, w, r = cuda_randn(33, hidden, dtype=dtype), cuda_randn(hidden, dtype=dtype, seed=1), cuda_randn(33, hidden, dtype=dtype, seed=2)
    buf = torch.empty(x.numel() + 1, dtype=dtype, device="cuda")
    x_off = buf[1:].view_as(x).copy_(x)
    want = oracle("rms_norm")(x.cpu().double(), w.cpu().double(), 1e-6)
    for got in (rms(x, w, 1e-6), rms(x_off, w, 1e-6)):
        assert_close_to_ref(got, want, f"rms_norm {dtype} hidden {hidden}", ulps=ULPS[dtype])
    want = oracle("fused_add_rms_norm")(x.cpu().double(), r.cpu().double(), w.cpu().double(), 1e-6)
    xs, rs = x.clone(), r.clone()
    assert fused(xs, rs, w, 1e-6) is None
    assert_close_to_ref(torch.cat([rs.flatten(), xs.flatten()]), want, f"fused_add_rms_norm {dtype} hidden {hidden}",
                        ulps=ULPS[dtype])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("hidden", [2048, 4096, 8192])
@pytest.mark.parametrize("threads_a_row", [256, 128, 64])
def test_rows_past_one_wave_agree_with_the_oracle(rows, dtype, hidden, threads_a_row):
    """As many rows as CTAs of ``threads_a_row`` threads fill the GPU's thread slots (256: one wave, where rows of
    513-1024 vectors take the reload path; 128 and 64, and a few more: past every wave, and past four waves of
    512-thread CTAs, where those rows take the reload path again): the launch shapes chosen by the count of rows
    and the row's width in vectors run, and match the oracle."""
    rms, fused = rows
    props = torch.cuda.get_device_properties(0)
    tokens = props.multi_processor_count * props.max_threads_per_multi_processor // threads_a_row
    tokens += 5 if threads_a_row < 256 else 0
    x, w, r = (cuda_randn(tokens, hidden, dtype=dtype), cuda_randn(hidden, dtype=dtype, seed=1),
               cuda_randn(tokens, hidden, dtype=dtype, seed=2))
    want = oracle("rms_norm")(x.cpu().double(), w.cpu().double(), 1e-6)
    assert_close_to_ref(rms(x, w, 1e-6), want, f"rms_norm {dtype} [{tokens}, {hidden}]", ulps=ULPS[dtype])
    want = oracle("fused_add_rms_norm")(x.cpu().double(), r.cpu().double(), w.cpu().double(), 1e-6)
    assert fused(x, r, w, 1e-6) is None
    assert_close_to_ref(torch.cat([r.flatten(), x.flatten()]), want,
                        f"fused_add_rms_norm {dtype} [{tokens}, {hidden}]", ulps=ULPS[dtype])


def test_many_rows_of_a_narrow_hidden_share_blocks(rows):
    """hidden 64 bf16 needs 8 threads; rows are packed several to a block, and the last block is partial."""
    x, w = cuda_randn(1001, 64), cuda_randn(64)
    want = oracle("rms_norm")(x.cpu().double(), w.cpu().double(), 1e-6)
    assert_close_to_ref(rows[0](x, w, 1e-6), want, "rms_norm 1001 x 64", ulps=ULPS[torch.bfloat16])


def test_graph_capture_replays(rows):
    """Current stream, no host sync: both rows capture, and replay reads the new inputs."""
    rms, fused = rows
    x, w = cuda_randn(64, 4096), cuda_randn(4096)
    out = torch.empty_like(x)
    r = cuda_randn(64, 4096, seed=3)
    xf, rf = x.clone(), r.clone()
    rms(x, w, 1e-6, out=out)
    fused(xf, rf, w, 1e-6)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rms(x, w, 1e-6, out=out)
        fused(xf, rf, w, 1e-6)
    x.copy_(cuda_randn(64, 4096, seed=4))
    xf.copy_(x)
    rf.copy_(r)
    graph.replay()
    torch.cuda.synchronize()
    assert_close_to_ref(out, oracle("rms_norm")(x.cpu().double(), w.cpu().double()), "replayed rms_norm",
                        ulps=ULPS[torch.bfloat16])
    want = oracle("fused_add_rms_norm")(x.cpu().double(), r.cpu().double(), w.cpu().double())
    assert_close_to_ref(torch.cat([rf.flatten(), xf.flatten()]), want, "replayed fused_add_rms_norm",
                        ulps=ULPS[torch.bfloat16])


# ------------------------------------------------------------------ the Gluon row (sm_90 and newer, Triton >= 3.6)

GLUON = "gluon/rms_norm"


@pytest.fixture(scope="module")
def gluon_rms():
    row = spec.get_row(GLUON)
    avail = row.probe(torch.device("cuda"))
    if not avail:
        pytest.skip(f"{GLUON}: {avail.reason}")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip(f"{GLUON} is written for sm_90 and newer")
    return row.load()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("tokens, hidden", [(1, 4096), (7, 4097), (33, 1000), (2, 8), (3, 16384), (5, 16385),
                                            (4, 20000), (2, 65536)])
def test_gluon_row_agrees_with_the_oracle_aligned_unaligned_and_strided(gluon_rms, dtype, tokens, hidden):
    """One pass and two, a masked tail, 16-byte accesses where aligned, the same data one element into its
    storage, and a row-strided slice x[:, :H] of a [T, 2H] buffer written into a slice of another."""
    x, w = cuda_randn(tokens, hidden, dtype=dtype), cuda_randn(hidden, dtype=dtype, seed=1)
    want = oracle("rms_norm")(x.cpu().double(), w.cpu().double(), 1e-6)
    buf = torch.empty(x.numel() + 1, dtype=dtype, device="cuda")
    x_off = buf[1:].view_as(x).copy_(x)
    wide = torch.zeros(tokens, 2 * hidden, dtype=dtype, device="cuda")
    wide[:, :hidden] = x
    out_wide = torch.zeros_like(wide)
    for what, got in (("contiguous", gluon_rms(x, w, 1e-6)), ("unaligned", gluon_rms(x_off, w, 1e-6)),
                      ("strided", gluon_rms(wide[:, :hidden], w, 1e-6, out=out_wide[:, :hidden]))):
        assert_close_to_ref(got, want, f"{GLUON} {what} {dtype} [{tokens}, {hidden}]", ulps=ULPS[dtype])
    assert not out_wide[:, hidden:].any()  # nothing written past the slice


def test_gluon_row_refuses_bad_inputs_as_the_other_rows_do(gluon_rms):
    with pytest.raises(ValueError, match=r"^rms_norm: weight must be \[64\]"):
        gluon_rms(_x(), cuda_randn(63), 1e-6)
    with pytest.raises(ValueError, match=r"^rms_norm: the Gluon row runs on cuda tensors"):
        gluon_rms(_x().cpu(), _w().cpu(), 1e-6)
    assert gluon_rms(torch.empty(0, 64, dtype=torch.bfloat16, device="cuda"), _w(), 1e-6).numel() == 0


def test_gluon_row_passes_verify(gluon_rms):
    """verify's whole reference set (tails, an unaligned view, special values) against native/rms_norm; not recorded,
    so the shipped record stays what the package says."""
    from rapid_llm.kernels.verification.golden import verify

    report = verify(GLUON, record=False)
    assert report.passed, str(report)


def test_gluon_row_graph_capture_replays(gluon_rms):
    assert_graph_replay_matches_the_oracle(gluon_rms, "gluon rms_norm")


def test_gluon_row_inspects_with_registers_and_its_layout_in_the_ir(gluon_rms):
    from rapid_llm.kernels.inspection.inspector import inspect

    gluon_rms(cuda_randn(2, 4096), cuda_randn(4096), 1e-6)
    result = inspect(GLUON)
    assert result.facts, str(result)
    for symbol, facts in result.facts.items():
        assert facts.registers > 0 and facts.spills == 0, str(result)
        assert "#ttg.blocked" in (result.code(symbol, "ttgir") or ""), symbol
        assert "ld.global" in (result.code(symbol, "ptx") or ""), symbol


def test_compare_runs_the_gluon_row_beside_the_triton_row(gluon_rms):
    from rapid_llm.bench.compare import compare

    result = compare("triton/rms_norm", GLUON, sizes=[4096 * 4096], dtypes=["bf16"], seconds=1.0, why=False)
    assert result.a.passed and result.b.passed, str(result)
