"""reshape_and_cache_flash on a GPU: the CUDA and Triton rows bit for bit the native row (copies) or within the
scatter mode (fp8) over Llama-3-8B's and other shapes, vector and scalar paths, strided caches (the halves of one
kv buffer), key/value sliced from a fused qkv, padding and out-of-range slots left unwritten, every other byte of
the caches untouched, the bad inputs raising without a CUDA error left behind, CUDA-graph capture, and the CUDA
row passing verify (it ships golden-unverified until it does). The CPU checks, and the helpers these use, are in
tests/ops/test_reshape_and_cache_flash.py.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.ops.cache.reshape_and_cache_flash import reference as R
from rapid_llm.kernels.ops.cache.reshape_and_cache_flash.native import reshape_and_cache_flash as native
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify
from tests.contract.bad_input_cases import on_device
from tests.ops.test_reshape_and_cache_flash import BAD, OP, _call
from tests.reference import assert_by_compare_mode

pytestmark = pytest.mark.gpu
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@pytest.fixture(scope="module")
def gpu_rows():
    from rapid_llm.kernels.toolchain import jit

    rows = {}
    for row in spec.rows_for(OP):
        if row.backend != "native" and row.probe(torch.device("cuda")):
            rows[row.name] = row.target.launcher() if row.backend == "jit" else row.load()
    if not rows:
        pytest.skip(f"no GPU row of {OP} runs here: {jit.available().reason}")
    return rows


SHAPES = [  # (tokens, heads, head_size, block_size, num_blocks): decode and prefill, vector and scalar paths
    (1, 8, 128, 16, 64), (7, 8, 128, 16, 8), (128, 8, 128, 16, 16), (4096, 8, 128, 16, 300), (33, 4, 64, 32, 4),
    (17, 3, 80, 16, 3), (9, 1, 20, 5, 4), (16384, 8, 128, 16, 1100),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_gpu_rows_write_what_the_floor_writes(gpu_rows, dtype, fp8, shape):
    tokens, heads, head_size, block_size, num_blocks = shape
    gen = torch.Generator().manual_seed(tokens)
    args = R.make_case(tokens, heads, head_size, block_size, num_blocks, dtype, torch.device("cuda"), gen, fp8=fp8)
    want = R.call(native, *args)
    for name, fn in gpu_rows.items():
        got = R.call(fn, *args)
        if fp8:
            assert_by_compare_mode(OP, fn, args, what=name)
        else:
            assert torch.equal(got, want), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_rows_take_strided_caches_and_fused_qkv_slices(gpu_rows, dtype):
    gen = torch.Generator().manual_seed(5)
    for label, args in R.edge_cases(dtype, torch.device("cuda"), gen):
        for name, fn in gpu_rows.items():
            assert_by_compare_mode(OP, fn, args, what=f"{name}, {label}")


def test_out_of_range_slots_are_left_unwritten_on_cuda(gpu_rows):
    """On CUDA no row reads the slots back to check them: a slot past the cache leaves its token unwritten."""
    args = list(R.make_case(4, 2, 64, 16, 2, torch.bfloat16, torch.device("cuda"), torch.Generator().manual_seed(1),
                            slots=torch.tensor([3, 32, -1, 1000])))
    for name, fn in gpu_rows.items():
        kc, vc = args[2].clone(), args[3].clone()
        fn(args[0], args[1], kc, vc, *args[4:])
        torch.cuda.synchronize()
        want_k = args[2].clone()
        want_k[0, 3] = args[0][0]
        assert torch.equal(kc, want_k), name


@pytest.mark.parametrize("condition", sorted(BAD))
def test_bad_inputs_raise_and_leave_no_cuda_error(gpu_rows, condition):
    if condition in ("a slot past the cache", "a slot below -1"):
        pytest.skip("slot values are read on CPU tensors only (a sync per call on CUDA)")
    for name in gpu_rows:
        args, _ = on_device(list(_call(**BAD[condition][0])), {}, "cuda")  # aliased arguments stay aliased
        with pytest.raises(ValueError):
            spec.get_row(name).load()(*args)
    torch.cuda.synchronize()


def test_gpu_rows_capture_in_a_cuda_graph(gpu_rows):
    args = R.make_case(16, 8, 128, 16, 4, torch.bfloat16, torch.device("cuda"), torch.Generator().manual_seed(2))
    for name, fn in gpu_rows.items():
        kc, vc = args[2].clone(), args[3].clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(args[0], args[1], kc, vc, *args[4:])
        kc.copy_(args[2])
        vc.copy_(args[3])
        graph.replay()
        torch.cuda.synchronize()
        want_k, want_v = args[2].clone(), args[3].clone()
        native(args[0], args[1], want_k, want_v, *args[4:])
        assert torch.equal(kc, want_k) and torch.equal(vc, want_v), name


def test_the_cuda_row_passes_verify_in_the_scatter_mode(gpu_rows):
    if f"jit/{OP}" not in gpu_rows:
        pytest.skip("the CUDA row does not run here")
    report = verify(f"jit/{OP}", device="cuda", record=False)
    assert report.passed, str(report)
