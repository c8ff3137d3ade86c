"""Row strides on a GPU: the CUDA rows of rms_norm, fused_add_rms_norm and silu_and_mul on row-strided views.

The checks of tests/contract/test_row_strides.py (whose module docstring says why) run here on the CUDA rows, against
the floor on both of their paths (a row stride that keeps rows 16-byte aligned keeps the vector path, an odd one takes
the scalar path); and their launchers refuse views without one row stride, and replay row-strided inputs in a graph.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.registry import spec
from tests.contract import test_row_strides as cpu_tests
from tests.contract.test_row_strides import DTYPES, EPS, NORM_VIEWS, SILU_VIEWS, in_buffer, row_fn, weight

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("backend", ["jit"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, width", NORM_VIEWS, ids=[f"{s}-in-{w}" for s, w in NORM_VIEWS])
def test_rms_norm_reads_rows_at_their_stride(backend, dtype, shape, width):
    cpu_tests.test_rms_norm_reads_rows_at_their_stride(backend, dtype, shape, width)


@pytest.mark.parametrize("backend", ["jit"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, width", NORM_VIEWS, ids=[f"{s}-in-{w}" for s, w in NORM_VIEWS])
def test_fused_add_rms_norm_writes_both_in_place_at_their_strides(backend, dtype, shape, width):
    cpu_tests.test_fused_add_rms_norm_writes_both_in_place_at_their_strides(backend, dtype, shape, width)


@pytest.mark.parametrize("backend", ["jit"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, width", SILU_VIEWS, ids=[f"{s}-in-{w}" for s, w in SILU_VIEWS])
def test_silu_and_mul_reads_both_halves_at_the_row_stride(backend, dtype, shape, width):
    cpu_tests.test_silu_and_mul_reads_both_halves_at_the_row_stride(backend, dtype, shape, width)


# ------------------------------------------------------------------ the CUDA launchers' checks


def launcher(name: str):
    """A CUDA row's launcher itself (out first, no allocation): its checks, not the out rule's."""
    row_fn(name)
    return spec.get_row(name).target.launcher()


def _cuda(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda")


#: (row, the launcher's arguments, the message).
BAD_LAYOUTS = [
    ("jit/rms_norm", lambda: (torch.empty(4, 64, device="cuda"), _cuda(64, 4).t(), _cuda(64), EPS),
     r"^rms_norm: x must have a contiguous last dim and one row stride, got \[4, 64\] fp32 on cuda:\d with strides "
     r"\[1, 4\]$"),
    ("jit/rms_norm", lambda: (_cuda(64).expand(4, 64), _cuda(4, 64), _cuda(64), EPS),
     r"^rms_norm: out must have a contiguous last dim and one row stride"),
    ("jit/rms_norm", lambda: (torch.empty(2, 3, 64, device="cuda"), _cuda(2, 4, 128)[:, :3, :64], _cuda(64), EPS),
     r"^rms_norm: x must have a contiguous last dim and one row stride, got \[2, 3, 64\] fp32 on cuda:\d with "
     r"strides \[512, 128, 1\]$"),
    ("jit/rms_norm", lambda: (torch.empty(4, 64, device="cuda"), _cuda(4, 64), _cuda(128)[::2], EPS),
     r"^rms_norm: contiguous tensors only"),
    ("jit/fused_add_rms_norm", lambda: (_cuda(64, 4).t(), _cuda(4, 64), _cuda(64), EPS),
     r"^fused_add_rms_norm: x must have a contiguous last dim and one row stride"),
    ("jit/fused_add_rms_norm", lambda: (_cuda(4, 128)[:, :64], _cuda(4, 128)[:, ::2], _cuda(64), EPS),
     r"^fused_add_rms_norm: residual must have a contiguous last dim and one row stride"),
    ("jit/silu_and_mul", lambda: (torch.empty(8, 32, device="cuda"), _cuda(64, 8).t()),
     r"^silu_and_mul: x must have a contiguous last dim and one row stride"),
]


@pytest.mark.parametrize("row, make, match", BAD_LAYOUTS,
                         ids=["rms-x-transposed", "rms-out-overlapping", "rms-x-non-uniform", "rms-weight-step",
                              "fused-x-transposed", "fused-residual-step", "silu-x-transposed"])
def test_cuda_launchers_refuse_views_without_one_row_stride(row, make, match):
    with pytest.raises(ValueError, match=match):
        launcher(row)(*make())
    torch.cuda.synchronize()  # no sticky CUDA error was left behind


def test_cuda_rows_replay_row_strided_inputs_in_a_graph():
    """The row stride is a launch argument like any other: captured, it replays with the inputs' new values."""
    rms, silu = row_fn("jit/rms_norm"), row_fn("jit/silu_and_mul")
    x, _ = in_buffer((64, 4096), 8192, torch.bfloat16)
    g, _ = in_buffer((64, 4096), 8192, torch.bfloat16, scale=4.0)
    w = weight(4096, torch.bfloat16)
    out, act = torch.empty(64, 4096, dtype=torch.bfloat16, device="cuda"), torch.empty(64, 2048, dtype=torch.bfloat16,
                                                                                       device="cuda")
    rms(x, w, EPS, out=out)
    silu(g, out=act)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rms(x, w, EPS, out=out)
        silu(g, out=act)
    x.copy_(in_buffer((64, 4096), 8192, torch.bfloat16, seed=7)[0])
    g.copy_(in_buffer((64, 4096), 8192, torch.bfloat16, seed=8, scale=4.0)[0])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, rms(x.contiguous(), w, EPS))
    assert torch.equal(act, row_fn("native/silu_and_mul")(g))
