"""Every row of every declared op, checked once: verify against the op's declared reference, the
row's golden record holds, and an empty input is handled. A new op or row is covered by being declared.

A row whose toolchain or device is missing here is skipped with the reason its probe gives.
"""
from __future__ import annotations

import shutil

import pytest
import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.golden import verify
from tests.contract.cheats.shipped import INTERPRETED_DTYPES

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
    """verify, in every dtype the row takes, passes and measures no diff above the shipped record. A Triton row in
    the CPU interpreter is verified in fp32 only: the interpreter computes half dtypes with numpy, not as a GPU does
    (it truncates fp32 -> bf16 where a GPU rounds to nearest), so its half results say little of the row's, and each
    dtype costs as much interpreter time as fp32; this test on CUDA, in the GPU suite, verifies the Triton rows in
    every dtype and holds each record."""
    device = _runnable(name)
    row = spec.get_row(name)
    shipped = row.golden
    interpreted = [d for d in row.dtypes if d in INTERPRETED_DTYPES] if row.backend == "triton" \
        and device.type == "cpu" else []
    # a verdict over some dtypes is not recorded: the registry keeps the shipped record whole for later tests
    report = verify(name, device=device, dtypes=interpreted or None, record=not interpreted)
    assert report.passed, str(report)
    assert report.regressions(shipped) == [], str(report)


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


def _r(d: torch.device, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, device=d).to(dtype)


def _e(d: torch.device, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, device=d, dtype=dtype)


_FP8 = torch.float8_e4m3fn


def _rope(d: torch.device, **changed) -> tuple[tuple, dict]:
    args = dict(positions=torch.arange(4, device=d), q=_r(d, 4, 16), k=_r(d, 4, 16), head_size=8,
                cos_sin_cache=_r(d, 16, 8), is_neox=True)
    return tuple(dict(args, **changed).values()), {}  # positional: a .cu row takes its arguments so


def _merge(d: torch.device, **changed) -> tuple[tuple, dict]:
    args = dict(output=_e(d, 4, 2, 8), output_lse=_e(d, 2, 4), v_a=_r(d, 4, 2, 8), lse_a=_r(d, 2, 4),
                v_b=_r(d, 4, 2, 8), lse_b=_r(d, 2, 4))
    return tuple(dict(args, **changed).values()), {}


def _quant(d: torch.device, **changed) -> tuple[tuple, dict]:
    args = dict(output=_e(d, 4, 16, dtype=_FP8), x=_r(d, 4, 16), scales=_e(d, 4, 1), static=False)
    return tuple(dict(args, **changed).values()), {}


#: The bad inputs every row must refuse in the same words as the native floor (the same type too): code that
#: catches the error must not depend on which row served the call. One entry per condition an op checks.
BAD_INPUTS = {  # (op, condition) -> device -> (args, kwargs)
    ("scale", "out of another shape"): lambda d: ((_r(d, 8), 2.0), {"out": _e(d, 4)}),
    ("scale", "out of another dtype"): lambda d: ((_r(d, 8), 2.0), {"out": _e(d, 8, dtype=torch.float16)}),
    ("rms_norm", "weight of the wrong size"): lambda d: ((_r(d, 2, 16), _r(d, 8), 1e-6), {}),
    ("rms_norm", "weight of another dtype"): lambda d: ((_r(d, 2, 16), _r(d, 16, dtype=torch.float16), 1e-6), {}),
    ("rms_norm", "out of another shape"): lambda d: ((_r(d, 2, 16), _r(d, 16), 1e-6), {"out": _e(d, 2, 8)}),
    ("fused_add_rms_norm", "weight of the wrong size"): lambda d: ((_r(d, 2, 16), _r(d, 2, 16), _r(d, 8), 1e-6), {}),
    ("fused_add_rms_norm", "residual of another shape"):
        lambda d: ((_r(d, 2, 16), _r(d, 3, 16), _r(d, 16), 1e-6), {}),
    ("fused_add_rms_norm", "residual of another dtype"):
        lambda d: ((_r(d, 2, 16), _r(d, 2, 16, dtype=torch.float16), _r(d, 16), 1e-6), {}),
    ("silu_and_mul", "an odd last dim"): lambda d: ((_r(d, 2, 7),), {}),
    ("silu_and_mul", "out of another shape"): lambda d: ((_r(d, 2, 8),), {"out": _e(d, 2, 8)}),
    ("rotary_embedding", "rot_dim over head_size"): lambda d: _rope(d, head_size=6, q=_r(d, 4, 12), k=_r(d, 4, 12)),
    ("rotary_embedding", "head_size not dividing q"): lambda d: _rope(d, head_size=5, cos_sin_cache=_r(d, 16, 4)),
    ("rotary_embedding", "q and k of other dtypes"): lambda d: _rope(d, k=_r(d, 4, 16, dtype=torch.float16)),
    ("rotary_embedding", "positions of another length"): lambda d: _rope(d, positions=torch.arange(3, device=d)),
    ("rotary_embedding", "float positions"): lambda d: _rope(d, positions=_r(d, 4)),
    ("scaled_fp8_quant", "scales in fp16"): lambda d: _quant(d, scales=_e(d, 4, 1, dtype=torch.float16)),
    ("scaled_fp8_quant", "output not fp8"): lambda d: _quant(d, output=_e(d, 4, 16)),
    ("scaled_fp8_quant", "output of another shape"): lambda d: _quant(d, output=_e(d, 4, 8, dtype=_FP8)),
    ("scaled_fp8_quant", "scales of no form"): lambda d: _quant(d, scales=_e(d, 4, 3)),
    ("merge_attn_states", "an lse of another shape"): lambda d: _merge(d, lse_b=_r(d, 2, 5)),
    ("merge_attn_states", "v_b of another shape"): lambda d: _merge(d, v_b=_r(d, 4, 2, 4)),
    ("merge_attn_states", "v_a of no head dim"): lambda d: _merge(d, v_a=_r(d, 4, 16)),
}
_ROW_CONDITIONS = [(n, c) for n in _all_rows() for o, c in BAD_INPUTS if spec.get_row(n).op == o]


@pytest.mark.parametrize("name, condition", _ROW_CONDITIONS, ids=[f"{n}: {c}" for n, c in _ROW_CONDITIONS])
def test_every_row_refuses_a_bad_input_as_the_floor_does(name, condition):
    row = spec.get_row(name)
    device = _runnable(name)
    floor = next(r for r in spec.rows_for(row.op) if r.is_native)
    args, kwargs = BAD_INPUTS[row.op, condition](device)
    with pytest.raises(Exception) as expected:
        floor.load()(*args, **kwargs)
    with pytest.raises(Exception) as caught:
        row.load()(*args, **kwargs)
    assert type(caught.value) is type(expected.value) is ValueError
    assert str(caught.value) == str(expected.value)


_LAUNCHER_CONDITIONS = [(n, c) for n, c in _ROW_CONDITIONS if spec.get_row(n).backend == "jit"]


@pytest.mark.parametrize("name, condition", _LAUNCHER_CONDITIONS, ids=[f"{n}: {c}" for n, c in _LAUNCHER_CONDITIONS])
def test_every_cuda_launcher_refuses_a_bad_input_as_the_floor_does(name, condition):
    """The .cu launchers check shapes and dtypes before the device, so their words are compared on any machine
    with the toolchain: CPU tensors reach the same RL_CHECK a GPU call would."""
    if shutil.which("g++") is None or shutil.which("nvcc") is None:
        pytest.skip("building a launcher needs g++ and the CUDA toolkit's headers (nvcc)")
    row = spec.get_row(name)
    floor = next(r for r in spec.rows_for(row.op) if r.is_native)
    args, kwargs = BAD_INPUTS[row.op, condition](torch.device("cpu"))
    with pytest.raises(ValueError) as expected:
        floor.load()(*args, **kwargs)
    with pytest.raises(ValueError) as caught:
        row.target(*args, **kwargs)  # the launcher, bound as the row binds it (no device probe)
    assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize("op, condition", sorted(BAD_INPUTS), ids=[f"{o}: {c}" for o, c in sorted(BAD_INPUTS)])
def test_dispatch_refuses_a_bad_input_as_the_floor_does(op, condition, device):
    import rapid_llm.kernels as K

    floor = next(r for r in spec.rows_for(op) if r.is_native)
    args, kwargs = BAD_INPUTS[op, condition](device)
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
