"""Every row of every declared op, checked once: verify against the op's declared reference, the
row's golden record holds, and an empty input is handled. A new op or row is covered by being declared.

A row whose toolchain or device is missing here is skipped with the reason its probe gives.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify

HAS_CUDA = torch.cuda.is_available()


def _all_rows() -> list[str]:
    return [row.name for op in spec.all_ops() for row in spec.rows_for(op)]


def _runnable(name: str) -> torch.device:
    row = spec.get_row(name)
    device = torch.device("cuda" if HAS_CUDA and "cuda" in row.devices else "cpu")
    if device.type not in row.devices:
        pytest.skip(f"{name} runs on {', '.join(row.devices)} only")
    avail = row.probe(device)
    if not avail:
        pytest.skip(f"{name}: {avail.reason}")
    return device


@pytest.mark.parametrize("name", _all_rows())
def test_row_passes_its_reference_and_holds_its_record(name):
    device = _runnable(name)
    shipped = spec.get_row(name).golden
    report = verify(name, device=device)
    assert report.passed, str(report)
    regressions = report.regressions(shipped)
    if spec.get_row(name).backend == "triton" and device.type == "cpu":
        # Triton's CPU interpreter truncates fp32 -> bf16 instead of rounding to nearest: bf16 passes the
        # tolerance above but can sit one ulp further from the baseline than the record; GPU runs check it.
        regressions = [r for r in regressions if not r.startswith("bf16")]
    assert regressions == [], str(report)


@pytest.mark.parametrize("name", _all_rows())
def test_row_handles_an_empty_input(name):
    device = _runnable(name)
    row = spec.get_row(name)
    reference = spec.get_decl(row.op).reference
    dtype = platform.torch_dtype(row.dtypes[0])
    args = reference.make_inputs((0,), dtype, device, torch.Generator().manual_seed(0))
    call = reference.call or (lambda f, *a: f(*a))
    out = call(row.load(), *args)
    # An op with its own comparison rule (verification.compare_modes) returns its parts as float64.
    assert out.numel() == 0 and (out.dtype == dtype or reference.compare is not None)


#: Dtypes no Triton or CUDA row takes: such a row called directly with one must say so in a ValueError line
#: naming the op (a .cu launcher's RL_CHECK, a Triton row's own check), not in a compiler's log.
UNDECLARED = ("fp64", "int32")


@pytest.mark.parametrize("dtype", UNDECLARED)
@pytest.mark.parametrize("name", [n for n in _all_rows() if spec.get_row(n).backend != "native"])
def test_a_row_called_with_a_dtype_it_does_not_take_says_so_in_one_line(name, dtype):
    device = _runnable(name)
    row = spec.get_row(name)
    if dtype in row.dtypes:
        pytest.skip(f"{name} takes {dtype}")
    decl = spec.get_decl(row.op)
    case = decl.bench(4096, torch.float32, device)
    bad = platform.torch_dtype(dtype)
    args = [a.to(bad) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in case.args]
    kwargs = {k: a.to(bad) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
              for k, a in case.kwargs.items()}
    with pytest.raises(ValueError) as caught:
        row.load()(*args, **kwargs)
    message = str(caught.value)
    assert message.startswith(f"{row.op}:") and "\n" not in message, message


def _weight_of_the_wrong_size(device: torch.device) -> dict[str, tuple]:
    x, w = torch.randn(2, 16, device=device), torch.randn(8, device=device)
    return {"rms_norm": (x, w, 1e-6), "fused_add_rms_norm": (x, torch.randn(2, 16, device=device), w, 1e-6)}


#: One bad input per op that every row must refuse in the same words as the native floor (the same type too):
#: code that catches the error must not depend on which row served the call.
BAD_INPUTS = {  # op -> device -> (args, kwargs)
    "scale": lambda d: ((torch.randn(8, device=d), 2.0), {"out": torch.empty(4, device=d)}),
    "rms_norm": lambda d: (_weight_of_the_wrong_size(d)["rms_norm"], {}),
    "fused_add_rms_norm": lambda d: (_weight_of_the_wrong_size(d)["fused_add_rms_norm"], {}),
    "silu_and_mul": lambda d: ((torch.randn(2, 7, device=d),), {}),
    "rotary_embedding": lambda d: ((torch.arange(4, device=d), torch.randn(4, 16, device=d),
                                    torch.randn(4, 16, device=d), 6, torch.randn(16, 6, device=d), True), {}),
    "scaled_fp8_quant": lambda d: ((torch.empty(4, 16, device=d, dtype=torch.float8_e4m3fn),
                                    torch.randn(4, 16, device=d), torch.empty(4, 1, device=d, dtype=torch.float16),
                                    False), {}),
    "merge_attn_states": lambda d: ((torch.empty(4, 2, 8, device=d), torch.empty(2, 4, device=d),
                                     torch.randn(4, 2, 8, device=d), torch.randn(2, 4, device=d),
                                     torch.randn(4, 2, 8, device=d), torch.randn(2, 5, device=d)), {}),
}


@pytest.mark.parametrize("name", [n for n in _all_rows() if spec.get_row(n).op in BAD_INPUTS])
def test_every_row_refuses_a_bad_input_as_the_floor_does(name):
    device = _runnable(name)
    row = spec.get_row(name)
    floor = next(r for r in spec.rows_for(row.op) if r.is_native)
    args, kwargs = BAD_INPUTS[row.op](device)
    with pytest.raises(Exception) as expected:
        floor.load()(*args, **kwargs)
    with pytest.raises(Exception) as caught:
        row.load()(*args, **kwargs)
    assert type(caught.value) is type(expected.value) is ValueError
    assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize("op", sorted(BAD_INPUTS))
def test_dispatch_refuses_a_bad_input_as_the_floor_does(op, device):
    import rapid_llm.kernels as K

    floor = next(r for r in spec.rows_for(op) if r.is_native)
    args, kwargs = BAD_INPUTS[op](device)
    with pytest.raises(ValueError) as expected:
        floor.load()(*args, **kwargs)
    with pytest.raises(ValueError) as caught:
        getattr(K, op)(*args, **kwargs)
    assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize("op", spec.all_ops())
def test_every_op_is_declared_with_one_native_floor(op):
    """The library never holds a row whose op has no declaration (reference, bench case, floor)."""
    decl = spec.get_decl(op)
    assert decl.name == op and callable(decl.bench)
    assert [r.backend for r in spec.rows_for(op)].count("native") == 1
