"""The JIT fast path on a GPU: checks raised cleanly, torch's stream, graph capture and reload after an edit, on the
tutorial's scale kernel as a fast-path source (benchmarks/jit/kernels/fast/scale.cu), and a launch error caught. What
runs without a GPU (host pass, device pass, link, binding, errors) is in tests/unit/toolchain/test_fastpath.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.toolchain import jit
from tests.unit.toolchain.test_fastpath import needs_toolchain

pytestmark = [pytest.mark.gpu, needs_toolchain]

SOURCE = Path(__file__).resolve().parents[4] / "benchmarks" / "jit" / "kernels" / "fast" / "scale.cu"


@pytest.fixture(scope="module")
def scale_module():
    avail = jit.available()
    if not avail:
        pytest.skip(f"JIT toolchain unavailable: {avail.reason}")
    result = jit.build_jit("scale", SOURCE)
    assert result.builder == "fast"
    return result.module


@pytest.mark.parametrize("make, match", [
    (lambda: (torch.empty(8, device="cuda"), torch.ones(8), 2.0), r"^scale: CUDA tensors only, got \[8\] fp32 on cpu$"),
    (lambda: (torch.empty(8, device="cuda", dtype=torch.float64), torch.ones(8, device="cuda", dtype=torch.float64), 2.0),
     r"^scale: dtype fp64 is not supported \(supported: bf16, fp16, fp32\)$"),
    (lambda: (torch.empty(4, device="cuda"), torch.ones(8, device="cuda")[::2], 2.0), r"^scale: contiguous tensors only"),
    (lambda: (torch.empty(4, device="cuda"), torch.ones(8, device="cuda"), 2.0), r"^scale: shapes/dtypes differ"),
])
def test_checks_raise_without_cuda_error_state(scale_module, make, match):
    with pytest.raises(ValueError, match=match):
        scale_module.scale(*make())
    torch.cuda.synchronize()  # no sticky error was left behind
    x = torch.ones(1024, device="cuda")
    out = torch.empty_like(x)
    scale_module.scale(out, x, 2.0)
    assert out.eq(2.0).all()


def test_runs_on_torchs_current_stream(scale_module):
    """Ordered after earlier work on a side stream: the launch went to that stream, not the default one."""
    side = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    out = torch.zeros_like(x)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # keep the side stream busy (~0.1 s)
        x.fill_(3.0)
        scale_module.scale(out, x, 2.0)
    side.synchronize()
    assert out.eq(6.0).all()


def test_graph_capture_and_replay(scale_module):
    x = torch.randn(4097, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    scale_module.scale(out, x, 1.5)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scale_module.scale(out, x, 1.5)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, (x.float() * 1.5).to(torch.bfloat16), rtol=0, atol=0)


def test_reload_after_edit_runs_the_new_code(scale_module, tmp_path):
    edited = tmp_path / "scale.cu"
    text = SOURCE.read_text()
    edited.write_text(text.replace("static_cast<float>(in[idx]) * factor", "static_cast<float>(in[idx]) * factor * 2.0f"))
    module = jit.build_jit("scale", edited).module
    x = torch.ones(1000, device="cuda")
    out = torch.empty_like(x)
    module.scale(out, x, 1.5)
    assert out.eq(3.0).all()
    scale_module.scale(out, x, 1.5)  # the first build is still bound and unchanged
    assert out.eq(1.5).all()


def test_launch_errors_are_caught(tmp_path):
    """An impossible launch (too many threads per block) raises with the driver's error; nothing crashes."""
    src = tmp_path / "bad_launch.cu"
    src.write_text(r"""
#include "common/rapid_llm.cuh"
#if RL_DEVICE
__global__ void one(float* out) { out[threadIdx.x] = 1.0f; }
#endif
#if RL_HOST
__global__ void one(float* out);
void bad(rl::Tensor out) { rl::launch(one, 1, 4096, 0, out.data<float>()); }
RL_EXPORT(bad)
#endif
""")
    module = jit.build_jit("bad_launch", src).module
    with pytest.raises(RuntimeError, match=r"^CUDA error launching one\(float\*\): CUDA_ERROR_INVALID_VALUE"):
        module.bad(torch.empty(4096, device="cuda"))
    torch.cuda.synchronize()
