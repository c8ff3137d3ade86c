"""native/scale: the floor. Checked against the float64 oracle on every dtype."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.ops.elementwise.scale.native import scale
from tests.ops.scale_cases import FACTORS, SIZES, make_input
from tests.reference import assert_close_to_ref, scale_ref


def test_writes_into_out(device):
    x = make_input(4097, torch.float32, device)
    out = torch.empty_like(x)
    assert scale(x, 3.0, out=out) is out
    assert_close_to_ref(out.cpu(), scale_ref(x.cpu(), 3.0), "native/scale out=")


def test_multidimensional_input_keeps_shape(device):
    x = make_input(24, torch.float32, device).view(2, 3, 4)
    assert scale(x, 2.0).shape == (2, 3, 4)


@pytest.mark.parametrize("bad_out", [lambda x: torch.empty(3, dtype=x.dtype, device=x.device),
                                     lambda x: torch.empty_like(x, dtype=torch.float64)])
def test_mismatched_out_raises(device, bad_out):
    x = make_input(16, torch.float32, device)
    with pytest.raises(ValueError, match=r"scale: shapes/dtypes differ: \["):
        scale(x, 2.0, out=bad_out(x))


def test_non_tensor_raises():
    with pytest.raises(TypeError, match="scale: input must be a tensor"):
        scale([1.0, 2.0], 2.0)
