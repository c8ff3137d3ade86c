"""triton/scale against the oracle: on the GPU for real, on CPU in Triton's interpreter."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels import spec
from rapid_llm.kernels.dispatch import explain
from tests.kernels.scale_cases import DTYPES, FACTORS, SIZES, make_input
from tests.reference import assert_close_to_ref, scale_ref

scale_triton = pytest.importorskip("rapid_llm.kernels.ops.elementwise.scale_triton").scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("numel", SIZES)
@pytest.mark.parametrize("factor", FACTORS)
def test_matches_oracle(device, dtype, numel, factor):
    x = make_input(numel, dtype, device)
    out = scale_triton(x, factor)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_ref(out.cpu(), scale_ref(x.cpu(), factor), f"triton/scale {dtype} n={numel}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_within_golden_record(device, dtype):
    """The shipped GoldenRecord is a promise: the measured diff may not exceed it."""
    if device.type == "cpu" and dtype == torch.bfloat16:
        pytest.xfail("Triton's interpreter truncates fp32->bf16 (the GPU rounds to nearest even), "
                     "so it sits 1 bf16 ulp off the native row; the oracle test above still holds")
    import rapid_llm.kernels.ops.elementwise  # noqa: F401  (registers the rows)
    from rapid_llm.kernels.ops.elementwise.scale_native import scale as scale_native

    record = spec.get_row("triton/scale").golden
    assert record.verified and record.baseline == "native/scale"
    x = make_input(65539, dtype, device, seed=1)
    diff = (scale_triton(x, 0.7).double() - scale_native(x, 0.7).double()).abs().max().item()
    assert diff <= record.max_abs_diff


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
    with pytest.raises(ValueError, match="scale: out must match"):
        scale_triton(x, 2.0, out=torch.empty(8, device=device))


def test_non_contiguous_raises(device):
    x = make_input(32, torch.float32, device).view(4, 8).t()
    with pytest.raises(ValueError, match="contiguous"):
        scale_triton(x, 2.0)
