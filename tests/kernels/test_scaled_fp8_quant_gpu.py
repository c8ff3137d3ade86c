"""scaled_fp8_quant on a GPU: every row (native, Triton, CUDA) verified in the quantised-output mode, vLLM's
whole test_fp8_quant.py matrix (tokens 1, 7, 4096 x hidden 17, 1024-1026, 5137, 8193 x bf16 / fp16 / fp32)
in each form, CUDA-graph capture, and the op under torch.compile.

    python -m pytest -m gpu tests/kernels/test_scaled_fp8_quant_gpu.py
"""
from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels import platform
from rapid_llm.kernels.ops.quant import scaled_fp8_quant_reference as R
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify
from tests.kernels.test_scaled_fp8_quant import FORMS, check, make_args

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

ROWS = ("native/scaled_fp8_quant", "triton/scaled_fp8_quant", "jit/scaled_fp8_quant")
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
CUDA = torch.device("cuda")


@pytest.fixture(params=ROWS)
def gpu_row(request):
    row = spec.get_row(request.param)
    avail = row.probe(CUDA)
    if not avail:
        pytest.skip(f"{row.name}: {avail.reason}")
    return row


def test_row_passes_verify_and_holds_its_record(gpu_row):
    report = verify(gpu_row.name, device=CUDA)
    assert report.passed, str(report)
    assert report.regressions(gpu_row.golden) == [], str(report)
    for r in report.results:  # scales exact on every case
        assert r.notes and r.notes[0].endswith(" exact") and "0 further" in r.notes[0], r.notes


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
@pytest.mark.parametrize("hidden", R.VLLM_HIDDEN)
@pytest.mark.parametrize("tokens", R.VLLM_TOKENS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_vllm_matrix(gpu_row, dtype, tokens, hidden, form):
    _, groups, is_static = form
    if groups == "g128" and hidden % 128:
        pytest.skip(f"1x128 groups need hidden % 128 == 0 (hidden {hidden})")
    counts = check(gpu_row.load(), make_args(tokens, hidden, dtype, CUDA, groups, is_static))
    assert counts["values further off"] == 0 and counts["scales not exact"] == 0


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_rows_agree_with_the_floor_on_scales_bit_for_bit(gpu_row, form):
    _, groups, is_static = form
    args = make_args(4096, 4096, torch.bfloat16, CUDA, groups, is_static, rand=False)
    native = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    gpu_row.load()(*args)
    spec.get_row("native/scaled_fp8_quant").load()(*native)
    assert torch.equal(args[2], native[2])
    ulps = (args[0].view(torch.uint8).int() - native[0].view(torch.uint8).int()).abs()
    assert int(ulps.max()) <= 1


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_graph_capture_replays_the_eager_result(gpu_row, form):
    if not gpu_row.graph_safe:
        pytest.skip(f"{gpu_row.name} is not graph safe")
    _, groups, is_static = form
    fn = gpu_row.load()
    args = make_args(16, 4096, torch.bfloat16, CUDA, groups, is_static, rand=False)
    eager = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    fn(*eager)
    fn(*args)  # warm (builds, autotunes) outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args)
    args[0].zero_()
    if not is_static:
        args[2].zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(args[0].view(torch.uint8), eager[0].view(torch.uint8)) and torch.equal(args[2], eager[2])


def test_dispatch_and_compile_give_the_floor_within_one_ulp():
    args = make_args(64, 4096, torch.bfloat16, CUDA, "g128", False, rand=False)
    native = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    spec.get_row("native/scaled_fp8_quant").load()(*native)

    @torch.compile(fullgraph=True)
    def quantise(out, x, scales):
        K.scaled_fp8_quant(out, x, scales, False)
        return out.float().sum()

    quantise(args[0], args[1], args[2])
    assert torch.equal(args[2], native[2])
    assert int((args[0].view(torch.uint8).int() - native[0].view(torch.uint8).int()).abs().max()) <= 1
    print(K.explain("scaled_fp8_quant", *args))
