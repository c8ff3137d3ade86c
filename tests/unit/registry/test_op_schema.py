"""An op's schema is derived from one call of its native row, once per native function and example in a process."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.registry import op_schema
from rapid_llm.kernels.registry.op_schema import SchemaError


def _counting(fail_first: bool = False):
    calls = {"native": 0, "inputs": 0}

    def native(x: torch.Tensor, alpha: float) -> torch.Tensor:
        calls["native"] += 1
        if fail_first and calls["native"] == 1:
            raise RuntimeError("not yet")
        return x * alpha

    def make_inputs(shape, dtype, device, gen):
        calls["inputs"] += 1
        return torch.randn(shape, generator=gen, dtype=dtype, device=device), 2.0

    return native, make_inputs, calls


def test_a_schema_is_derived_once_per_native_function_and_example():
    native, make_inputs, calls = _counting()
    first = op_schema.derive("t_schema_once", native, make_inputs, dtypes=("fp32",), devices=("cpu",))
    again = op_schema.derive("t_schema_once", native, make_inputs, dtypes=("fp32",), devices=("cpu",))
    assert again == first and first.text.startswith("t_schema_once(Tensor x, float alpha)")
    assert calls == {"native": 1, "inputs": 1}
    other, _, other_calls = _counting()  # another native function: derived afresh
    assert op_schema.derive("t_schema_once", other, make_inputs, dtypes=("fp32",), devices=("cpu",)) == first
    assert other_calls["native"] == 1 and calls["inputs"] == 2


def test_a_failed_derivation_is_not_remembered():
    native, make_inputs, calls = _counting(fail_first=True)
    with pytest.raises(SchemaError, match="the native row raised RuntimeError on the example: not yet"):
        op_schema.derive("t_schema_retry", native, make_inputs, dtypes=("fp32",), devices=("cpu",))
    schema = op_schema.derive("t_schema_retry", native, make_inputs, dtypes=("fp32",), devices=("cpu",))
    assert schema.returns == "Tensor" and calls["native"] == 2
