"""jit/scale on a GPU: the tutorial's CUDA kernel, built once per module, checked against the oracle. The CPU checks
of the op are in tests/ops/test_scale.py."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.registry import spec
from tests.reference import assert_close_to_ref, scale_ref

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def jit_scale():
    """Build once; a broken toolchain fails here, fast, with the compiler log."""
    from rapid_llm.kernels.toolchain import jit

    avail = jit.available()
    if not avail:
        pytest.skip(f"JIT toolchain unavailable: {avail.reason}")
    row = spec.get_row("jit/scale")
    row.target.launcher()
    return row.load()


def test_cpu_tensor_raises(jit_scale):
    """The op's checks run first on every row (jit_row.op_checks): the floor's words, as K's."""
    x = torch.ones(16)
    with pytest.raises(ValueError, match=r"^scale: shapes/dtypes differ: \[16\] fp32 on cuda:0 vs \[16\] fp32 on cpu"):
        jit_scale(x, 2.0, out=torch.empty(16, device="cuda"))


def test_shape_mismatch_raises(jit_scale):
    x = torch.ones(16, device="cuda")
    with pytest.raises(ValueError, match=r"^scale: shapes/dtypes differ: \[8\] fp32 on cuda:0 vs \[16\]"):
        jit_scale(x, 2.0, out=torch.empty(8, device="cuda"))


def test_non_contiguous_raises(jit_scale):
    x = torch.ones(8, 4, device="cuda").t()
    with pytest.raises(ValueError, match="contiguous"):
        jit_scale(x, 2.0)


def test_graph_capture_replays(jit_scale):
    """The kernel uses the current stream and no host sync, so capture and replay work."""
    x = torch.randn(4097, device="cuda")
    out = torch.empty_like(x)
    jit_scale(x, 2.0, out=out)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        jit_scale(x, 2.0, out=out)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert_close_to_ref(out.cpu(), scale_ref(x.cpu(), 2.0), "jit/scale replay")


def test_dispatch_on_bf16_runs_a_verified_row_and_says_where_figures_came_from():
    import rapid_llm.kernels as K
    from rapid_llm.kernels.dispatch.dispatcher import explain

    x = torch.ones(1 << 20, device="cuda", dtype=torch.bfloat16)
    e = explain("scale", x)
    print(e)
    assert e.chosen.verdict == "chosen" and spec.get_row(e.chosen.name).golden.verified
    assert all(v.source for v in e.rows if v.measured_us is not None)
    assert_close_to_ref(K.scale(x, 2.0).cpu(), scale_ref(x.cpu(), 2.0), "scale dispatched")
