"""silu_and_mul's CUDA row on a GPU: bit for bit the native row on every shape (aligned, unaligned, the benchmark's)
and at every input value of each dtype, its halved out, its refusal of a strided view, and CUDA-graph replay. The CPU
checks, and the helpers these use, are in tests/ops/test_silu_and_mul.py.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.registry import spec
from tests.ops.test_silu_and_mul import DTYPES, SHAPES, _x, native

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def jit_row():
    from rapid_llm.kernels.toolchain import jit

    avail = jit.available()
    if not avail:
        pytest.skip(f"JIT toolchain unavailable: {avail.reason}")
    return spec.get_row("jit/silu_and_mul").load()


def _cuda_cases(dtype: torch.dtype) -> list[tuple[str, torch.Tensor]]:
    flat = _x((2 * 2 * 1024 + 1,), dtype, torch.device("cuda"))
    return [(f"{s}", _x(s, dtype, torch.device("cuda"))) for s in SHAPES + [(4096, 28672), (513, 2 * 4097)]] + [
        ("unaligned (storage offset 1)", flat[1:].view(2, 2048)),
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_row_is_the_native_row_bit_for_bit(jit_row, dtype):
    """Same fp32 recipe (expf, IEEE division, one rounding): no element may differ from torch's."""
    for label, x in _cuda_cases(dtype):
        out = torch.full((*x.shape[:-1], x.shape[-1] // 2), float("nan"), dtype=dtype, device="cuda")
        jit_row(x, out=out)
        assert torch.equal(out, native(x)), f"{label}: differs from native/silu_and_mul"


def _every_value(dtype: torch.dtype, start: int, count: int) -> torch.Tensor:
    """The values of ``dtype`` whose bit patterns, read unsigned, are start .. start + count - 1."""
    bits = {torch.float32: (torch.int32, 32), torch.bfloat16: (torch.int16, 16), torch.float16: (torch.int16, 16)}
    int_dtype, width = bits[dtype]
    u = torch.arange(start, start + count, dtype=torch.int64, device="cuda")
    signed = torch.where(u >= 1 << (width - 1), u - (1 << width), u)
    return signed.to(int_dtype).view(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_row_is_the_native_row_at_every_input_value(jit_row, dtype):
    """At every value a of the dtype (all 2**32 for fp32, in chunks), times b = 1 (an exact product), no output of
    the wave kernel may differ from torch's in its bits (NaN from NaN aside, whose payload IEEE leaves open): the
    bit-for-bit claim at every input, not only at random ones, so a cheaper division has to keep it everywhere."""
    width = 32 if dtype == torch.float32 else 16
    chunk = min(1 << 26, 1 << width)
    inner = 1 << 13  # rows of the wave kernel's 16-byte items
    x = torch.ones(chunk // inner, 2 * inner, dtype=dtype, device="cuda")
    out = torch.empty(chunk // inner, inner, dtype=dtype, device="cuda")
    int_dtype = torch.int32 if width == 32 else torch.int16
    for start in range(0, 1 << width, chunk):
        x[:, :inner] = _every_value(dtype, start, chunk).view(-1, inner)
        jit_row(x, out=out)
        want = native(x)
        differ = (out.view(int_dtype) != want.view(int_dtype)) & ~(out.isnan() & want.isnan())
        if differ.any():
            a = x[:, :inner][differ][:4].tolist()
            pytest.fail(f"{int(differ.sum())} of the values from bit pattern {start:#x} differ from "
                        f"native/silu_and_mul, first at a = {a}")


def test_cuda_row_allocates_the_halved_out(jit_row):
    x = _x((3, 4, 2 * 520), torch.bfloat16, torch.device("cuda"))
    out = jit_row(x)
    assert out.shape == (3, 4, 520) and torch.equal(out, native(x))
    with pytest.raises(ValueError, match="even"):
        jit_row(torch.ones(2, 7, device="cuda"))


def test_cuda_row_refuses_a_strided_view(jit_row):
    x = _x((64, 8), torch.float32, torch.device("cuda")).t()
    with pytest.raises(ValueError, match="silu_and_mul: x must have a contiguous last dim and one row stride"):
        jit_row(x, out=torch.empty(8, 32, device="cuda"))


def test_cuda_row_replays_in_a_graph(jit_row):
    x = _x((16, 2 * 14336), torch.bfloat16, torch.device("cuda"))
    out = torch.empty(16, 14336, dtype=torch.bfloat16, device="cuda")
    jit_row(x, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        jit_row(x, out=out)
    x.copy_(_x(tuple(x.shape), torch.bfloat16, torch.device("cuda"), seed=3))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, native(x))
