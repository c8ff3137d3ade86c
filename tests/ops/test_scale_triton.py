"""triton/scale against the oracle: on the GPU for real, on CPU in Triton's interpreter."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.dispatch.dispatcher import explain
from tests.ops.scale_cases import DTYPES, FACTORS, SIZES, make_input
from tests.reference import assert_close_to_ref, scale_ref

scale_triton = pytest.importorskip("rapid_llm.kernels.ops.elementwise.scale.triton").scale

@pytest.fixture(autouse=True)
def serve_interpreter():
    """These tests use Triton-labelled rows on CPU tensors to check dispatch rules: let them serve."""
    from rapid_llm.kernels.toolchain import triton_support

    triton_support.serve_interpreter(True)
    yield
    triton_support.serve_interpreter(None)



def test_dispatch_picks_triton_over_native(device):
    x = make_input(4097, torch.bfloat16, device)
    verdict = explain("scale", x).verdict("triton/scale")
    assert verdict.verdict in ("chosen", "outranked")
    if device.type == "cpu":
        # On CPU only native and triton survive, and triton outranks the floor.
        assert verdict.verdict == "chosen"


def test_writes_into_out(device):
    x = make_input(4097, torch.float16, device)
    out = torch.empty_like(x)
    assert scale_triton(x, 2.0, out=out) is out
    assert_close_to_ref(out.cpu(), scale_ref(x.cpu(), 2.0), "triton/scale out=")


def test_shape_mismatch_raises(device):
    x = make_input(16, torch.float32, device)
    with pytest.raises(ValueError, match=r"scale: shapes/dtypes differ: \["):
        scale_triton(x, 2.0, out=torch.empty(8, device=device))


def test_non_contiguous_raises(device):
    x = make_input(32, torch.float32, device).view(4, 8).t()
    with pytest.raises(ValueError, match="contiguous"):
        scale_triton(x, 2.0)
