"""silu_and_mul: what is particular to it beyond tests/contract/test_rows.py's verify of every row.

The numerics contract (the fp32 recipe, rounded once), shapes (leading dims, tails, T=1, empty),
bad inputs raising errors that name the op, the benchmark case, the CUDA launcher's checks (built
here without a GPU). The CUDA row against the native row, bit for bit, is in tests/gpu/ops/test_silu_and_mul.py.
"""
from __future__ import annotations

import shutil

import pytest
import torch

from rapid_llm.kernels.registry import spec
from tests.reference import assert_close_to_ref, oracle

HAS_CUDA = torch.cuda.is_available()
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
#: x shapes: one output, many short odd rows, a tail off every vector width, fp32-only vectors,
#: the benchmark row at T=1, and leading dims.
SHAPES = [(1, 2), (157, 26), (1, 8194), (3, 2002), (2, 2056), (1, 28672), (2, 3, 272)]


def _x(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) * 4).to(dtype=dtype, device=device)


def _row(backend: str):
    """A row's function through the registry (importing a group here would declare it outside the test's)."""
    row = spec.get_row(f"{backend}/silu_and_mul")
    avail = row.probe(torch.device("cuda" if HAS_CUDA else "cpu"))
    if not avail:
        pytest.skip(f"{row.name}: {avail.reason}")
    return row.load()


def native(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _row("native")(x, out=out)


def _triton():
    return _row("triton")


def _reference():
    spec.get_decl("silu_and_mul")  # the registry imports the group first
    from rapid_llm.kernels.ops.activation.silu_and_mul import reference as silu_and_mul_reference

    return silu_and_mul_reference


def assert_close_to_oracle(got: torch.Tensor, x: torch.Tensor, what: str) -> None:
    """Within one rounding of the exact value for half types; within 4 eps for fp32, whose recipe
    rounds four times (expf, the add, the division, the product) with no final rounding to hide them."""
    assert_close_to_ref(got, oracle("silu_and_mul")(x.cpu().double()), what,
                        ulps=4 if got.dtype == torch.float32 else 1)


def _fp32_recipe(x: torch.Tensor) -> torch.Tensor:
    """The contract, written out: fp32 upcast, a / (1 + exp(-a)), times b, not yet rounded."""
    inner = x.shape[-1] // 2
    a, b = x[..., :inner].float(), x[..., inner:].float()
    return a / (1 + torch.exp(-a)) * b


ROWS = {"native": lambda: native, "triton": _triton}


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_matches_the_oracle(row, shape, dtype, device):
    fn = ROWS[row]()
    x = _x(shape, dtype, device)
    out = fn(x)
    assert out.shape == (*shape[:-1], shape[-1] // 2) and out.dtype == dtype
    assert_close_to_oracle(out, x, f"{row}/silu_and_mul {shape}")


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_rounded_once_from_the_fp32_recipe(row, dtype, device):
    """Rounding the fp32 product once gives the recipe's value except at rare rounding ties, where an
    fp32 ulp of exp decides; rounding silu(a) to the half type before the multiply would miss often."""
    if row == "triton" and dtype == torch.bfloat16 and not HAS_CUDA:
        pytest.skip("Triton's CPU interpreter truncates fp32 -> bf16 instead of rounding to nearest")
    fn = ROWS[row]()
    x = _x((8, 2 * 1024), dtype, device, seed=1)
    got = fn(x).cpu()
    want = _fp32_recipe(x.cpu()).to(dtype)
    mismatched = (got != want).float().mean().item()
    assert mismatched < 1e-3, f"{row}: {mismatched:.2%} of elements differ from the recipe rounded once"
    inner = x.shape[-1] // 2
    twice = (torch.nn.functional.silu(x[..., :inner].float()).to(dtype).float() * x[..., inner:].float()).to(dtype)
    assert (twice.cpu() != want).float().mean().item() > 0.05  # the contract is not vacuous at this size


@pytest.mark.parametrize("row", ROWS)
def test_infinite_and_nan_inputs_follow_ieee(row, device):
    fn = ROWS[row]()
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[inf, -inf, nan, 0.0, 2.0, 1.0, 1.0, 1.0, 1.0, nan]], device=device)
    got = fn(x).cpu()
    # silu(+inf) = inf; silu(-inf) = -inf / inf = NaN; NaN in either half stays NaN; silu(0) * 1 = 0.
    assert got[0, 0] == inf and got[0, 1].isnan() and got[0, 2].isnan() and got[0, 3] == 0 and got[0, 4].isnan()


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("shape", [(0, 26), (4, 0), (0,)], ids=str)
def test_empty_input_gives_an_empty_result(row, shape, device):
    x = torch.empty(shape, dtype=torch.bfloat16, device=device)
    out = ROWS[row]()(x)
    assert out.shape == (*shape[:-1], shape[-1] // 2) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("row", ROWS)
def test_writes_into_out(row, device):
    x = _x((3, 2002), torch.float16, device)
    out = torch.full((3, 1001), float("nan"), dtype=torch.float16, device=device)
    assert ROWS[row]()(x, out=out) is out
    assert_close_to_oracle(out, x, f"{row} out=")


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("shape", [(4, 7), (5,), ()], ids=str)
def test_odd_last_dim_raises(row, shape, device):
    x = torch.ones(shape, device=device)
    with pytest.raises(ValueError, match=r"silu_and_mul: the input's last dim must be even"):
        ROWS[row]()(x)


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("bad_out", [lambda x: torch.empty(4, 16, dtype=x.dtype, device=x.device),
                                     lambda x: torch.empty(4, 4, dtype=x.dtype, device=x.device),
                                     lambda x: torch.empty(4, 8, dtype=torch.float16, device=x.device)],
                         ids=["not-halved", "too-short", "dtype"])
def test_mismatched_out_raises(row, bad_out, device):
    x = torch.ones(4, 16, device=device)
    out = bad_out(x)
    words = "one dtype" if out.shape == (4, 8) else "x's shape with the last dim halved"
    with pytest.raises(ValueError, match=rf"^silu_and_mul: out (must be|and x must have) {words}, got out \[4, "):
        ROWS[row]()(x, out=out)


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32], ids=str)
def test_unsupported_dtype_raises(row, dtype, device):
    with pytest.raises(ValueError, match=r"silu_and_mul: x must be bf16, fp16 or fp32"):
        ROWS[row]()(torch.ones(2, 4, dtype=dtype, device=device))


def test_native_takes_strided_views_and_triton_refuses_them(device):
    x = _x((64, 8), torch.float32, device).t()  # [8, 64], strided: no contiguous last dim
    assert_close_to_oracle(native(x), x, "native strided")
    with pytest.raises(ValueError, match=r"silu_and_mul: x must have a contiguous last dim and one row stride"):
        _triton()(x)


def test_non_tensor_raises():
    with pytest.raises(TypeError, match="silu_and_mul: x must be a tensor"):
        native([1.0, 2.0])


def test_dispatched_op_answers_like_the_floor(device):
    import rapid_llm.kernels as K

    x = _x((5, 2 * 136), torch.bfloat16, device)
    assert_close_to_ref(K.silu_and_mul(x), native(x).double(), "K.silu_and_mul against the floor", ulps=2)


def test_bench_case_sweeps_tokens_at_the_benchmark_row():
    reference = _reference()
    decl = spec.get_decl("silu_and_mul")
    assert decl.token_numel == reference.BENCH_TOKEN_NUMEL == 2 * 14336
    meta = torch.device("meta")
    for numel, tokens in [(1, 1), (28672 * 3 + 5, 3), (28672 * 4096, 4096)]:
        case = reference.bench_case(numel, torch.bfloat16, meta)
        (x,) = case.args
        assert x.shape == (tokens, 28672) and case.kwargs["out"].shape == (tokens, 14336)
        assert case.bytes_moved == 3 * tokens * 14336 * 2


def test_reference_sizes_map_to_sensible_shapes():
    reference = _reference()
    gen = torch.Generator().manual_seed(0)
    cpu = torch.device("cpu")
    shapes = {n: reference.make_inputs((n,), torch.float32, cpu, gen)[0].shape for n in (0, 1, 4097, 65536)}
    assert shapes == {0: (0, 26), 1: (1, 2), 4097: (157, 26), 65536: (32, 2048)}


# ----------------------------------------------------------------- the CUDA row's launcher, built here

needs_toolchain = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                     reason="building the CUDA row needs g++ and the CUDA toolkit (nvcc)")


@pytest.fixture(scope="module")
def launcher_module():
    """The shipped .cu built by the fast path (host and device passes); its checks run without a GPU."""
    from rapid_llm.kernels.toolchain import jit

    return jit.build_jit("silu_and_mul", "activation/silu_and_mul/silu_and_mul.cu", builder="fast").module


@needs_toolchain
@pytest.mark.parametrize("out, x, match", [
    ((2, 3), (2, 7), r"^silu_and_mul: the input's last dim must be even \(\[\.\.\., 2I\]\), got \[2, 7\]$"),
    ((2, 3), (2, 8), r"^silu_and_mul: out must be x's shape with the last dim halved, got out \[2, 3\] fp32 on cpu"
                     r" for x \[2, 8\] fp32 on cpu$"),
    ((3, 4), (2, 8), r"^silu_and_mul: out must be x's shape with the last dim halved"),
    ((2, 4), (), r"^silu_and_mul: the input's last dim must be even"),
    ((2, 4), (2, 8), r"^silu_and_mul: CUDA tensors only, got \[2, 4\] fp32 on cpu$"),
])
def test_launcher_checks_name_the_problem(launcher_module, out, x, match):
    with pytest.raises(ValueError, match=match):
        launcher_module.silu_and_mul(torch.empty(out), torch.ones(x))


@needs_toolchain
def test_launcher_refuses_mixed_dtypes(launcher_module):
    with pytest.raises(ValueError, match=r"^silu_and_mul: out and x must have one dtype, got out \[2, 4\] fp16"):
        launcher_module.silu_and_mul(torch.empty(2, 4, dtype=torch.float16), torch.ones(2, 8))
