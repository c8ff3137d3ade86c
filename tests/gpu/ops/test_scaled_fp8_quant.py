"""scaled_fp8_quant on a GPU: every row (native, Triton, CUDA) verified in the quantised-output mode over vLLM's whole
test_fp8_quant.py matrix (tokens 1, 7, 4096 x hidden 17, 1024-1026, 5137, 8193 x bf16 / fp16 / fp32) in each form,
the rows' scales bit for bit against the floor's, CUDA-graph capture, and the op under torch.compile. The CPU checks,
and the helpers these use, are in tests/ops/test_scaled_fp8_quant.py.

Tokens 1 and 7 are tests/ops/test_scaled_fp8_quant.py::test_vllm_matrix's, which runs every row on CUDA where there
is one (its device fixture); here are vLLM's 4096 tokens, one test per dtype, hidden size and form, with the case
made and its float64 oracle run once for every row.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels import platform
from rapid_llm.kernels.ops.quant.scaled_fp8_quant import reference as R
from rapid_llm.kernels.registry import spec
from tests.ops.test_scaled_fp8_quant import DTYPES, FORMS, OP, make_args
from tests.reference import assert_rows_by_compare_mode
from tests.rows import runnable_rows

pytestmark = pytest.mark.gpu

ROWS = ("native/scaled_fp8_quant", "triton/scaled_fp8_quant", "jit/scaled_fp8_quant")
CUDA = torch.device("cuda")


@pytest.fixture(params=ROWS)
def gpu_row(request):
    row = spec.get_row(request.param)
    avail = row.probe(CUDA)
    if not avail:
        pytest.skip(f"{row.name}: {avail.reason}")
    return row


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
@pytest.mark.parametrize("hidden", R.VLLM_HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_vllm_matrix_at_4096_tokens(dtype, hidden, form):
    label, groups, is_static = form
    if groups == "g128" and hidden % 128:
        pytest.skip(f"1x128 groups need hidden % 128 == 0 (hidden {hidden})")
    rows = {row.name: row.load() for row in runnable_rows(OP, CUDA)}
    for name in set(ROWS) - set(rows):
        warnings.warn(f"{name} is left out of vLLM's matrix here: {spec.get_row(name).probe(CUDA).reason}")
    args = make_args(R.VLLM_TOKENS[-1], hidden, dtype, CUDA, groups, is_static)
    case = f"[{R.VLLM_TOKENS[-1]}, {hidden}] {platform.dtype_name(dtype)} {label}"
    n_values = args[1].numel()
    counts = assert_rows_by_compare_mode(OP, rows, args, case,
                                         lambda i: f"value {i}" if i < n_values else f"scale {i - n_values}")
    for name, c in counts.items():
        assert c["values further off"] == 0 and c["scales not exact"] == 0, f"{name} at {case}: {c}"


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
