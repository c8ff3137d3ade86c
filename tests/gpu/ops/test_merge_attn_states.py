"""merge_attn_states on a GPU: every row (native, Triton, CUDA) verified in the special-values mode over vLLM's whole
test_merge_attn_states matrix (tokens 256, 512, 613, 1024, 1536, 4096 x heads 4, 8, 16, 32, 48, 64 x head sizes 32,
48, 64, 96, 128, 256 x fp32 / fp16 / bf16, each side 10 % +inf LSE), the special values, CUDA-graph capture, and the
op under torch.compile. The CPU checks, and the helpers these use, are in tests/ops/test_merge_attn_states.py.

The matrix is one test per dtype, token count and head count: each head size's case is made and its float64
oracle run once, and every row is judged against it (making a case and its oracle costs more than a row's call).
"""
from __future__ import annotations

import warnings
from typing import Callable

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels import platform
from rapid_llm.kernels.ops.attention.merge_attn_states import reference as R
from rapid_llm.kernels.registry import spec
from tests.ops import test_merge_attn_states as cpu_tests
from tests.ops.test_merge_attn_states import DTYPES, check, vllm_case
from tests.reference import assert_by_compare_mode, assert_rows_by_compare_mode

pytestmark = pytest.mark.gpu

ROWS = ("native/merge_attn_states", "triton/merge_attn_states", "jit/merge_attn_states")
CUDA = torch.device("cuda")
TOKENS = (256, 512, 613, 1024, 1536, 4096)
HEADS = (4, 8, 16, 32, 48, 64)


@pytest.fixture(params=ROWS)
def gpu_row(request):
    row = spec.get_row(request.param)
    avail = row.probe(CUDA)
    if not avail:
        pytest.skip(f"{row.name}: {avail.reason}")
    return row


@pytest.fixture
def gpu_rows() -> dict[str, Callable]:
    """Every row that runs here, loaded, by name; one that cannot is named in a warning (its own tests below skip
    with the reason)."""
    rows = {}
    for name in ROWS:
        row = spec.get_row(name)
        avail = row.probe(CUDA)
        if avail:
            rows[name] = row.load()
        else:
            warnings.warn(f"{name} is left out of vLLM's matrix here: {avail.reason}")
    return rows


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_vllm_matrix(gpu_rows, dtype, tokens, heads):
    for head_size in R.VLLM_HEAD_SIZES:
        args = vllm_case(tokens, heads, head_size, dtype, CUDA, seed=tokens + heads + head_size)
        case = f"[{tokens}, {heads}, {head_size}] {platform.dtype_name(dtype)}"
        for name, counts in assert_rows_by_compare_mode(cpu_tests.OP, gpu_rows, args, case).items():
            assert counts["one side empty (the other side bit for bit)"] > 0, f"{name} at {case}: {counts}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_special_values_on_cuda(gpu_row, dtype):
    cpu_tests.test_special_values(gpu_row.load(), CUDA, dtype)


def test_graph_capture_replays_the_eager_result(gpu_row):
    fn = gpu_row.load()
    args = vllm_case(256, 16, 128, torch.bfloat16, CUDA)
    eager = (torch.empty_like(args[0]), torch.empty_like(args[1]), *args[2:])
    fn(*eager)
    fn(*args)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args)
    args[0].zero_()
    args[1].zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(args[0], eager[0]) and torch.equal(args[1].nan_to_num(), eager[1].nan_to_num())


def test_dispatch_and_compile():
    args = vllm_case(256, 16, 128, torch.bfloat16, CUDA)

    @torch.compile(fullgraph=True)
    def merge(out, out_lse, v_a, lse_a, v_b, lse_b):  # the op's contract: writes out and out_lse, returns None
        K.merge_attn_states(out, out_lse, v_a, lse_a, v_b, lse_b)

    assert_by_compare_mode("merge_attn_states", merge, args)
    check(lambda *a: K.merge_attn_states(*a), args[:])
    print(K.explain("merge_attn_states", *args))
