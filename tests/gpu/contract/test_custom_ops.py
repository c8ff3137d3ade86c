"""The custom ops on a GPU: opcheck on every reference case of every op and dtype, on CUDA; each op's C kernel runs what device-time dispatch runs, bit for bit, and raises a row's
words for a key it learned; the Llama-style decoder layer compiles under Inductor on CUDA in every dtype; every Triton
row compiles under torch.compile. The CPU checks, and the helpers these use, are in tests/contract/test_custom_ops.py.
"""
from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch import c_kernels, custom_ops, dispatcher as dispatch
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification import golden
from rapid_llm.models.llama import LlamaConfig, LlamaLayer
from tests.contract.test_custom_ops import DTYPES, SHIPPED, _check_layer, _clone, _layer_inputs, \
    opcheck_reference_cases

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("op", sorted(SHIPPED))
def test_the_c_kernel_runs_what_device_time_dispatch_runs(op):
    """On CUDA the custom op's C kernel learns the launcher the device-time dispatcher chose and then calls it
    without Python: outputs and in-place writes equal that dispatcher's, bit for bit, on every reference case."""
    assert c_kernels.why_not(op) == ""
    overload = custom_ops.torch_op(op).default
    device_time = dispatch.get_op(op, rule="device")
    for dtype in DTYPES:
        for label, args in golden.reference_cases(op, platform.torch_dtype(dtype), torch.device("cuda"),
                                                  golden.CPU_SIZES):
            for call in ("teaches", "learned"):
                mine, theirs = _clone(args), _clone(args)
                got, expected = overload(*mine), device_time(*theirs)
                for a, b in zip((got, *mine), (expected, *theirs)):
                    if isinstance(a, torch.Tensor):
                        assert torch.equal(a, b) or (a.isnan() == b.isnan()).all() and torch.equal(
                            a.nan_to_num(), b.nan_to_num()), f"{op} {dtype} {label} ({call})"
    assert any(launcher for _, launcher in c_kernels.learned(op)), c_kernels.learned(op)


def test_the_c_kernel_raises_the_rows_words_for_a_key_it_learned():
    x, w = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16), torch.randn(64, device="cuda", dtype=torch.bfloat16)
    op = torch.ops.rapid_llm.rms_norm.default
    op(x, w, 1e-6), op(x, w, 1e-6)
    assert any(launcher for _, launcher in c_kernels.learned("rms_norm"))
    with pytest.raises(RuntimeError, match="ValueError: .*weight"):
        op(x, w[:32], 1e-6)
    torch.testing.assert_close(op(x, w, 1e-6), K.rms_norm(x, w, 1e-6), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_decoder_layer_compiles_on_cuda(dtype):
    cfg = LlamaConfig(hidden=256, heads=8, kv_heads=2, head_dim=32, intermediate=512)
    layer = LlamaLayer.random(cfg, dtype=dtype, device="cuda")
    args = _layer_inputs(cfg, 33, dtype, torch.device("cuda"))
    _check_layer(layer, args, "inductor", dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("row", [r.name for op in spec.all_ops() for r in spec.rows_for(op) if r.backend == "triton"])
def test_triton_rows_compile_under_inductor(row, dtype):
    """A Triton row called inside torch.compile is compiled by Inductor (its kernel with Inductor's signature)."""
    kernel_row = spec.get_row(row)
    if dtype not in kernel_row.dtypes:
        pytest.skip(f"{row} does not take {dtype}")
    reference = spec.get_decl(kernel_row.op).reference
    call = reference.call or (lambda f, *a: f(*a))
    fn = kernel_row.load()
    args = reference.make_inputs((4097,), platform.torch_dtype(dtype), torch.device("cuda"),
                                 torch.Generator().manual_seed(0))
    expected = call(fn, *_clone(args))
    got = call(torch.compile(fn, fullgraph=True), *_clone(args))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(spec.all_ops()))
def test_opcheck_passes_on_every_reference_case_on_cuda(op, dtype):
    opcheck_reference_cases(op, dtype, torch.device("cuda"))
