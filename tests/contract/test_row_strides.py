"""Row strides: rms_norm, fused_add_rms_norm and silu_and_mul on ``x = randn(T, 2H)[:, :H]``.

vLLM and FlashInfer test these ops on such slices. Their Triton and CUDA rows declare layouts
("contiguous", "rows") and address each tensor at its own row stride (spec.row_stride), so those calls
run a fast row instead of the floor. Here: a Triton row gives on a row-strided view bit for bit what it
gives on a contiguous copy (in the interpreter on CPU), nothing reads or writes the gaps between rows,
dispatch sends row-strided calls to a fast row and transposed ones to the floor. The CUDA rows on a GPU
are in tests/gpu/contract/test_row_strides.py. The numerics of every row on the references' strided edge
cases are checked by test_rows.py.
"""
from __future__ import annotations

import shutil

import pytest
import torch

from rapid_llm.kernels.registry import spec
from tests.reference import assert_close_to_ref

HAS_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
EPS = 1e-6
#: The fast row checked here (in Triton's interpreter on CPU); the CUDA row's cases are the GPU file's.
BACKENDS = ("triton",)
#: (x's shape, its buffer's row width): vLLM's case, an odd stride (rows off the 16-byte grid), leading dims,
#: a row wider than the one-pass/vector limit, rows narrower than a warp.
NORM_VIEWS = [((5, 4096), 8192), ((3, 1024), 1025), ((2, 3, 520), 1040), ((2, 20000), 20008), ((9, 8), 24)]
#: (x's shape [..., 2I], its buffer's row width).
SILU_VIEWS = [((3, 2048), 4096), ((4, 2048), 2049), ((2, 3, 272), 544), ((1, 8194), 16388), ((6, 26), 30)]


def row_fn(name: str):
    row = spec.get_row(name)
    avail = row.probe(DEVICE)
    if not avail:
        pytest.skip(f"{name}: {avail.reason}")
    return row.load()


def in_buffer(shape: tuple[int, ...], width: int, dtype: torch.dtype, seed: int = 0,
              scale: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(view, buffer): random values in the first ``shape[-1]`` columns of a [..., width] buffer whose other
    columns hold NaN, so a kernel that reads a gap shows it in its result and one that writes a gap shows it
    in the buffer."""
    gen = torch.Generator().manual_seed(seed)
    buf = torch.full((*shape[:-1], width), float("nan"), dtype=dtype, device=DEVICE)
    view = buf[..., :shape[-1]]
    view.copy_((torch.randn(shape, generator=gen) * scale).to(dtype))
    return view, buf


def gaps_untouched(buf: torch.Tensor, used: int) -> bool:
    return bool(torch.isnan(buf[..., used:]).all())


def weight(hidden: int, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return (torch.randn(hidden, generator=gen) * 0.5 + 1.0).to(dtype=dtype, device=DEVICE)


def assert_like_floor(got: torch.Tensor, floor: torch.Tensor, what: str) -> None:
    """Within two roundings of the floor's value (the rows sum in another order than torch)."""
    assert_close_to_ref(got, floor.double(), f"{what} against the floor", ulps=4)


def test_the_fast_rows_declare_rows_and_the_floor_takes_every_layout():
    for op in OPS:
        for backend in ("triton", "jit"):
            assert spec.get_row(f"{backend}/{op}").layouts == ("contiguous", "rows"), f"{backend}/{op}"
        assert spec.get_row(f"native/{op}").layouts == spec.LAYOUTS


# ------------------------------------------------------------------ each fast row on row-strided views


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, width", NORM_VIEWS, ids=[f"{s}-in-{w}" for s, w in NORM_VIEWS])
def test_rms_norm_reads_rows_at_their_stride(backend, dtype, shape, width):
    fn = row_fn(f"{backend}/rms_norm")
    x, buf = in_buffer(shape, width, dtype)
    w = weight(shape[-1], dtype)
    got = fn(x, w, EPS)
    assert got.is_contiguous() and got.shape == x.shape
    if backend == "triton":  # the same program on the same row: the layout changes nothing
        assert torch.equal(got, fn(x.contiguous(), w, EPS))
    assert_like_floor(got, row_fn("native/rms_norm")(x, w, EPS), f"{backend}/rms_norm {shape} in {width}")
    out, out_buf = in_buffer(shape, width + 8, dtype, seed=5)
    assert fn(x, w, EPS, out=out) is out
    assert torch.equal(out, got), "a row-strided out holds what a contiguous one does"
    assert gaps_untouched(buf, shape[-1]) and gaps_untouched(out_buf, shape[-1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, width", NORM_VIEWS, ids=[f"{s}-in-{w}" for s, w in NORM_VIEWS])
def test_fused_add_rms_norm_writes_both_in_place_at_their_strides(backend, dtype, shape, width):
    fn = row_fn(f"{backend}/fused_add_rms_norm")
    x, x_buf = in_buffer(shape, width, dtype)
    r, r_buf = in_buffer(shape, shape[-1] + 3, dtype, seed=2)  # the residual's own stride, off the 16-byte grid
    w = weight(shape[-1], dtype)
    xc, rc = x.contiguous(), r.contiguous()
    xf, rf = x.clone(), r.clone()
    assert fn(x, r, w, EPS) is None
    if backend == "triton":
        fn(xc, rc, w, EPS)
        assert torch.equal(x, xc) and torch.equal(r, rc)
    row_fn("native/fused_add_rms_norm")(xf, rf, w, EPS)
    assert_like_floor(r, rf, f"{backend}/fused_add_rms_norm residual {shape}")
    assert_like_floor(x, xf, f"{backend}/fused_add_rms_norm x {shape}")
    assert gaps_untouched(x_buf, shape[-1]) and gaps_untouched(r_buf, shape[-1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, width", SILU_VIEWS, ids=[f"{s}-in-{w}" for s, w in SILU_VIEWS])
def test_silu_and_mul_reads_both_halves_at_the_row_stride(backend, dtype, shape, width):
    fn = row_fn(f"{backend}/silu_and_mul")
    x, buf = in_buffer(shape, width, dtype, scale=4.0)
    got = fn(x)
    half = (*shape[:-1], shape[-1] // 2)
    assert got.is_contiguous() and got.shape == half
    if backend == "triton":
        assert torch.equal(got, fn(x.contiguous()))
    floor = row_fn("native/silu_and_mul")(x)
    if backend == "jit":  # the native recipe bit for bit (test_silu_and_mul.py)
        assert torch.equal(got, floor)
    else:
        assert_like_floor(got, floor, f"{backend}/silu_and_mul {shape} in {width}")
    out, out_buf = in_buffer(half, half[-1] + 5, dtype, seed=5)
    assert fn(x, out=out) is out and torch.equal(out, got)
    assert gaps_untouched(buf, shape[-1]) and gaps_untouched(out_buf, half[-1])


@pytest.mark.parametrize("op, call", [
    ("rms_norm", lambda fn, x: fn(x, weight(x.shape[-1], x.dtype), EPS)),
    ("fused_add_rms_norm", lambda fn, x: fn(x, x.contiguous(), weight(x.shape[-1], x.dtype), EPS)),
    ("silu_and_mul", lambda fn, x: fn(x)),
], ids=list(OPS))
@pytest.mark.parametrize("view", [lambda t: t.t(), lambda t: t[:, ::2], lambda t: t[0].expand(8, 16)],
                         ids=["transposed", "step", "overlapping"])
def test_triton_rows_refuse_views_without_one_row_stride(op, call, view):
    x = view(torch.randn(16, 32, device=DEVICE)[:, :16])
    message = (rf"^{op}: x must have a contiguous last dim and one row stride, got a strided view \[\d+, \d+\] "
               r"with strides \[\d+, \d+\]$")
    if op == "fused_add_rms_norm" and x.stride(0) == 0:  # x is written: the op's own checks refuse it first
        message = rf"^{op}: x is written, but several of its elements share memory \(an expanded view"
    with pytest.raises(ValueError, match=message):
        call(row_fn(f"triton/{op}"), x)


# ------------------------------------------------------------------ through dispatch


@pytest.fixture
def serve_interpreter():
    """On CPU, dispatch sends calls to a Triton row only when asked to (triton_support.serve_interpreter)."""
    from rapid_llm.kernels.toolchain import triton_support

    triton_support.serve_interpreter(True)
    yield
    triton_support.serve_interpreter(None)


def _cases(dtype: torch.dtype) -> dict[str, tuple[tuple, tuple]]:
    """op -> (row-strided args, transposed args), at the benchmark's H = 4096 (silu: I = 2048)."""
    x, _ = in_buffer((16, 4096), 8192, dtype)
    t = x.contiguous().view(64, 1024).t()  # [1024, 64]: no row stride
    g, _ = in_buffer((16, 4096), 8192, dtype, scale=4.0)
    return {
        "rms_norm": ((x, weight(4096, dtype), EPS), (t, weight(64, dtype), EPS)),
        "fused_add_rms_norm": ((x, x.contiguous(), weight(4096, dtype), EPS),
                               (t, t.contiguous(), weight(64, dtype), EPS)),
        "silu_and_mul": ((g,), (g.contiguous().view(64, 1024).t(),)),
    }


@pytest.mark.parametrize("op", OPS)
def test_dispatch_sends_row_strided_calls_to_a_fast_row_and_transposed_ones_to_the_floor(op, serve_interpreter):
    import rapid_llm.kernels as K

    rows_args, strided_args = _cases(torch.bfloat16)[op]
    e = K.explain(op, *rows_args)
    assert e.context.layout == "rows" and e.chosen.backend != "native", str(e)
    e = K.explain(op, *strided_args)
    assert e.context.layout == "strided" and e.chosen.name == f"native/{op}", str(e)
    for backend in ("triton", "jit"):
        v = e.verdict(f"{backend}/{op}")
        assert v.verdict == "filtered"
        if v.reason.startswith("takes"):  # not filtered earlier (a CPU-only torch filters the CUDA row first)
            assert v.reason.endswith("this call has a strided view (its last dim or leading dims are not one row "
                                     "stride)")
    # The op itself, both layouts: what its floor computes (run on copies: fused_add works in place).
    floor = row_fn(f"native/{op}")
    for args in (rows_args, strided_args):
        mine = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        theirs = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        got, want = getattr(K, op)(*mine), floor(*theirs)
        if got is None:  # in place: x then residual
            got, want = torch.cat([mine[0].flatten(), mine[1].flatten()]), torch.cat([theirs[0].flatten(),
                                                                                       theirs[1].flatten()])
        assert_like_floor(got, want, f"K.{op}")


# ------------------------------------------------------------------ the CUDA launchers' checks

needs_toolchain = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                     reason="building the CUDA row needs g++ and the CUDA toolkit (nvcc)")


@needs_toolchain
def test_silu_launcher_checks_the_row_stride_before_the_device():
    """silu_and_mul's launcher checks layout with the shapes, so the fast path built here (no GPU) tests it."""
    from rapid_llm.kernels.toolchain import jit

    silu = jit.build_jit("silu_and_mul", "activation/silu_and_mul/silu_and_mul.cu", builder="fast").module.silu_and_mul
    with pytest.raises(ValueError, match=r"^silu_and_mul: x must have a contiguous last dim and one row stride, "
                                           r"got \[8, 64\] fp32 on cpu with strides \[1, 8\]$"):
        silu(torch.empty(8, 32), torch.ones(64, 8).t())
    with pytest.raises(ValueError, match=r"^silu_and_mul: out must have a contiguous last dim and one row stride, "
                                           r"got \[8, 32\] fp32 on cpu with strides \[0, 1\]$"):
        silu(torch.empty(32).expand(8, 32), torch.ones(8, 64))
    with pytest.raises(ValueError, match=r"^silu_and_mul: CUDA tensors only"):  # a row stride passes
        silu(torch.empty(8, 40)[:, :32], torch.ones(8, 128)[:, :64])
