"""merge_attn_states: every row that runs here against the float64 oracle in the special-values mode, over
shapes from vLLM's test_merge_attn_states (tokens, heads 4 to 32, head sizes 32 to 256, its +inf masks),
tails (a head size that is no 16-byte multiple, one element) and empty inputs; the special values one by one
(+inf and -inf as an empty side, the other passed through bit for bit even when the empty side holds NaN,
both empty, NaN); and the errors a bad call gets.

On CPU the rows are the native floor and the Triton row in Triton's interpreter; on a GPU the CUDA row too.
vLLM's whole matrix, CUDA-graph capture and the op under torch.compile are in
tests/gpu/ops/test_merge_attn_states.py. That every row passes verify and holds its record is
tests/contract/test_rows.py's.
"""
from __future__ import annotations

import math

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch import custom_ops
from rapid_llm.kernels.ops.attention.merge_attn_states import reference as R
from rapid_llm.kernels.registry import spec
from tests.reference import assert_by_compare_mode
from tests.rows import runnable_rows

OP = "merge_attn_states"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INF = math.inf


@pytest.fixture(params=[row.name for row in runnable_rows(OP)])
def row(request):
    """The rows that run here (collected so: a CPU run does not list the CUDA row's matrix as skipped cases;
    tests/contract/test_rows.py skips it once, with the reason)."""
    return spec.get_row(request.param).load()


def check(fn, args: tuple) -> dict[str, int]:
    """The special-values rule, element by element (tests.reference.assert_by_compare_mode)."""
    return assert_by_compare_mode(OP, fn, args)


def vllm_case(tokens: int, heads: int, head_size: int, dtype: torch.dtype, device: torch.device, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    la, lb = torch.randn((heads, tokens), generator=gen), torch.randn((heads, tokens), generator=gen)
    ma, mb = R.vllm_masks(heads, tokens, gen)
    la[ma], lb[mb] = INF, INF
    # The values made where they are used: vLLM's largest case is 2 x 67M elements, slow to draw on a CPU.
    on_device = torch.Generator(device=device).manual_seed(seed)
    va, vb = (torch.randn((tokens, heads, head_size), generator=on_device, device=device) for _ in range(2))
    return R.case(tokens, heads, head_size, dtype, device, gen, la, lb, va, vb)


@pytest.mark.parametrize("head_size", R.VLLM_HEAD_SIZES)
@pytest.mark.parametrize(("tokens", "heads"), [(7, 4), (61, 8), (256, 16)])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_vllm_shapes_with_infinite_lse(row, device, dtype, tokens, heads, head_size):
    if device.type == "cpu" and tokens * heads * head_size > 61 * 8 * 256 and "triton" in row.__module__:
        pytest.skip("kept small in Triton's interpreter (the GPU file runs vLLM's whole matrix)")
    counts = check(row, vllm_case(tokens, heads, head_size, dtype, device))
    assert counts["one side empty (the other side bit for bit)"] > 0


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 2, 4097), (5, 3, 20), (2, 4, 1), (0, 4, 128), (4, 0, 64)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_tails_and_empty(row, device, dtype, shape):
    args = R.case(*shape, dtype, device, torch.Generator().manual_seed(2))
    check(row, args)


def _merge(row, device, dtype, la: list[float], lb: list[float], va: list[float], vb: list[float]):
    """One token, len(la) heads, head size 8: values va[h] / vb[h] in every lane of head h."""
    heads = len(la)

    def values(v: list[float]) -> torch.Tensor:
        return torch.tensor(v, dtype=torch.float32).view(1, heads, 1).expand(1, heads, 8).contiguous()

    args = R.case(1, heads, 8, dtype, device, torch.Generator(), torch.tensor(la).view(heads, 1),
                  torch.tensor(lb).view(heads, 1), values(va), values(vb))
    assert row(*args) is None
    return args[0].float().cpu()[0, :, 0], args[1].cpu()[:, 0]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_special_values(row, device, dtype):
    out, lse = _merge(row, device, dtype,
                      la=[INF, -INF, 1.0, 2.0, -INF, INF, math.nan, 0.5, math.nan],
                      lb=[0.5, 0.25, -INF, INF, -INF, INF, 1.0, math.nan, INF],
                      va=[math.nan, math.nan, -0.75, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0],
                      vb=[3.0, -2.0, math.nan, math.nan, 1.0, 1.0, 1.0, 1.0, 1.0])
    # +inf or -inf: that side is empty, its values (NaN here) never reach the result; the other passes through
    assert out[:4].tolist() == [3.0, -2.0, -0.75, 1.5]
    assert lse[:4].tolist() == [0.5, 0.25, 1.0, 2.0]
    # both empty: 0 and -inf (vLLM's kernel gives NaN)
    assert out[4:6].tolist() == [0.0, 0.0] and lse[4:6].tolist() == [-INF, -INF]
    # a NaN LSE: NaN, even beside an empty side
    assert torch.isnan(out[6:]).all() and torch.isnan(lse[6:]).all()


def test_equal_lses_average_and_add_log2(row, device):
    out, lse = _merge(row, device, torch.float32, la=[1.0], lb=[1.0], va=[2.0], vb=[4.0])
    assert out.tolist() == [3.0] and lse.item() == pytest.approx(1.0 + math.log(2.0), abs=1e-6)


# ------------------------------------------------------------------ bad calls


def _args():
    return R.case(4, 2, 16, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: (a[0][:, :1], *a[1:]), "output must match v_a"),
    (lambda a: (a[0], a[1].t().contiguous(), *a[2:]),
     r"out_lse, lse_a and lse_b must be \[heads, tokens\] = \[2, 4\] fp32, got \[4, 2\] fp32"),
    (lambda a: (*a[:3], a[3].double(), *a[4:]), r"out_lse, lse_a and lse_b must be .* got \[2, 4\] fp64"),
    (lambda a: (*a[:4], a[4].half(), a[5]), "v_b must match v_a"),
    (lambda a: (a[0].view(4, 32), a[1], a[2].view(4, 32), *a[3:]), r"v_a must be \[tokens, heads, head_size\]"),
    (lambda a: (*a[:5], None), "lse_b must be a tensor"),
])
def test_bad_calls_name_the_op_and_the_problem(change, message):
    with pytest.raises((ValueError, TypeError), match=f"merge_attn_states: {message}"):
        K.merge_attn_states(*change(_args()))


def test_the_op_dispatches_and_is_a_custom_op():
    args = _args()
    assert K.merge_attn_states(*args) is None
    assert str(custom_ops.torch_op(OP).default._schema) == (
        "rapid_llm::merge_attn_states(Tensor(a!) output, Tensor(b!) output_lse, Tensor v_a, Tensor lse_a, "
        "Tensor v_b, Tensor lse_b) -> ()")
    again = (torch.empty_like(args[0]), torch.empty_like(args[1]), *args[2:])
    torch.ops.rapid_llm.merge_attn_states(*again)
    assert torch.equal(again[0], args[0]) and torch.equal(again[1], args[1])
