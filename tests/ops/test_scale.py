"""scale: what is particular to it beyond tests/contract/test_rows.py's verify of every row. The native floor
and the Triton row (on the GPU for real, on CPU in Triton's interpreter) against the float64 oracle; the CUDA
row's checks are in tests/gpu/ops/test_scale.py."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.dispatch.dispatcher import explain
from rapid_llm.kernels.ops.elementwise.scale.native import scale
from tests.reference import assert_close_to_ref, scale_ref


def make_input(numel: int, dtype: torch.dtype, device: torch.device, seed: int = 0) -> torch.Tensor:
    """Values spread over a few units, the same for every device."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(numel, generator=gen) * 4).to(dtype=dtype, device=device)


# ---------------------------------------------------------------- native/scale


def test_native_writes_into_out(device):
    x = make_input(4097, torch.float32, device)
    out = torch.empty_like(x)
    assert scale(x, 3.0, out=out) is out
    assert_close_to_ref(out.cpu(), scale_ref(x.cpu(), 3.0), "native/scale out=")


def test_native_multidimensional_input_keeps_shape(device):
    x = make_input(24, torch.float32, device).view(2, 3, 4)
    assert scale(x, 2.0).shape == (2, 3, 4)


@pytest.mark.parametrize("bad_out", [lambda x: torch.empty(3, dtype=x.dtype, device=x.device),
                                     lambda x: torch.empty_like(x, dtype=torch.float64)])
def test_native_mismatched_out_raises(device, bad_out):
    x = make_input(16, torch.float32, device)
    with pytest.raises(ValueError, match=r"scale: shapes/dtypes differ: \["):
        scale(x, 2.0, out=bad_out(x))


def test_native_non_tensor_raises():
    with pytest.raises(TypeError, match="scale: input must be a tensor"):
        scale([1.0, 2.0], 2.0)


# ---------------------------------------------------------------- triton/scale


@pytest.fixture
def serve_interpreter():
    """These tests use Triton-labelled rows on CPU tensors to check dispatch rules: let them serve."""
    from rapid_llm.kernels.toolchain import triton_support

    triton_support.serve_interpreter(True)
    yield
    triton_support.serve_interpreter(None)



@pytest.fixture
def scale_triton():
    """The Triton row's function (its tests skip where Triton is not installed)."""
    return pytest.importorskip("rapid_llm.kernels.ops.elementwise.scale.triton").scale


def test_dispatch_picks_triton_over_native(device, serve_interpreter):
    x = make_input(4097, torch.bfloat16, device)
    verdict = explain("scale", x).verdict("triton/scale")
    assert verdict.verdict in ("chosen", "outranked")
    if device.type == "cpu":
        # On CPU only native and triton survive, and triton outranks the floor.
        assert verdict.verdict == "chosen"


def test_triton_writes_into_out(device, scale_triton):
    x = make_input(4097, torch.float16, device)
    out = torch.empty_like(x)
    assert scale_triton(x, 2.0, out=out) is out
    assert_close_to_ref(out.cpu(), scale_ref(x.cpu(), 2.0), "triton/scale out=")


def test_triton_shape_mismatch_raises(device, scale_triton):
    x = make_input(16, torch.float32, device)
    with pytest.raises(ValueError, match=r"scale: shapes/dtypes differ: \["):
        scale_triton(x, 2.0, out=torch.empty(8, device=device))


def test_triton_non_contiguous_raises(device, scale_triton):
    x = make_input(32, torch.float32, device).view(4, 8).t()
    with pytest.raises(ValueError, match="contiguous"):
        scale_triton(x, 2.0)
