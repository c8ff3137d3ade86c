"""rms_norm and fused_add_rms_norm: the numerics contract, parameters, shapes and bad inputs.

Every row is verified on the reference inputs by test_rows.py; this file pins
what the tolerance there cannot see: that the normalised value is multiplied
by the weight in fp32 and rounded once, and that fused_add_rms_norm normalises
the fp32 sum rather than the rounded residual. The native and Triton rows run
here (Triton in its interpreter on CPU), and the CUDA rows' sources build for real through the fast path (host
and device pass) and refuse CPU tensors; what the CUDA rows do on a GPU is in tests/gpu/ops/test_rms_norm.py. The Gluon row has
no CPU interpreter: here it is filtered with that reason and compiled for sm_90 (registers, spills, its layout
in the IR, 16-byte accesses in the PTX); it runs in tests/gpu/ops/test_rms_norm.py.
"""
from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from rapid_llm.kernels.registry import spec
from tests.reference import assert_close_to_ref, oracle

HAS_CUDA = torch.cuda.is_available()
#: Rows checked for bad input here (the CUDA row's launcher raises the same ValueError on a GPU:
#: tests/gpu/ops/test_rms_norm.py).
ROWS = ("native", "triton")
#: Rows checked for numerics: the CUDA row too where a GPU is (its bad inputs: tests/gpu/ops/test_rms_norm.py).
NUMERIC_ROWS = ROWS + (("jit",) if HAS_CUDA else ())
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: Agreement between a row and the float64 oracle, in verify's rule's ulps (eps of the dtype, relative): one
#: rounding into a half type (with margin), and for fp32 the reduction's own steps (the former rtol 1e-5).
ULPS = {torch.float32: 84, torch.float16: 1, torch.bfloat16: 2}


def row_fn(op: str, backend: str):
    row = spec.get_row(f"{backend}/{op}")
    avail = row.probe(device())
    if not avail:
        pytest.skip(f"{row.name}: {avail.reason}")
    return row.load()


def device() -> torch.device:
    return torch.device("cuda" if HAS_CUDA else "cpu")


def randn(shape, dtype, seed=0, scale=1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) * scale).to(dtype=dtype, device=device())


def weight(hidden, dtype, seed=1) -> torch.Tensor:
    return randn((hidden,), dtype, seed, 0.5).add_(1.0)


def rounds_to_nearest(backend: str, dtype: torch.dtype) -> bool:
    """Triton's CPU interpreter truncates fp32 -> bf16 (no round to nearest); everything else rounds."""
    return not (backend == "triton" and dtype == torch.bfloat16 and not HAS_CUDA)


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}"
    assert_close_to_ref(got, want, what, ulps=ULPS[dtype])


# ------------------------------------------------------------------ the numerics contract

def fp32_inv_rms(total: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(total.square().mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("backend", NUMERIC_ROWS)
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_rms_norm_multiplies_the_weight_in_fp32_and_rounds_once(backend, dtype):
    if not rounds_to_nearest(backend, dtype):
        pytest.skip("Triton's CPU interpreter truncates to bf16; the GPU run checks this")
    fn = row_fn("rms_norm", backend)
    x, w = randn((16, 1024), dtype, seed=2, scale=3.0), weight(1024, dtype)
    xf = x.float()
    normed = xf * fp32_inv_rms(xf, 1e-6)
    once = (normed * w.float()).to(dtype)
    twice = (normed.to(dtype).float() * w.float()).to(dtype)  # the recipe the contract rules out
    got = fn(x, w, 1e-6)
    agree_once = (got == once).float().mean().item()
    agree_twice = (got == twice).float().mean().item()
    assert (once != twice).float().mean().item() > 0.1, "the inputs no longer tell the two recipes apart"
    assert agree_once > 0.99 and agree_once > agree_twice + 0.05, (agree_once, agree_twice)


@pytest.mark.parametrize("backend", NUMERIC_ROWS)
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_fused_add_normalises_the_fp32_sum_not_the_rounded_residual(backend, dtype):
    if not rounds_to_nearest(backend, dtype):
        pytest.skip("Triton's CPU interpreter truncates to bf16; the GPU run checks this")
    fn = row_fn("fused_add_rms_norm", backend)
    # A residual much larger than x: the sum loses x's low bits when rounded into the dtype.
    x, r, w = randn((16, 1024), dtype, seed=3), randn((16, 1024), dtype, seed=4, scale=300.0), weight(1024, dtype)
    total = x.float() + r.float()
    want_residual = total.to(dtype)
    from_sum = (total * fp32_inv_rms(total, 1e-6) * w.float()).to(dtype)
    rounded = want_residual.float()
    from_rounded = (rounded * fp32_inv_rms(rounded, 1e-6) * w.float()).to(dtype)  # ruled out
    xs, rs = x.clone(), r.clone()
    assert fn(xs, rs, w, 1e-6) is None
    assert torch.equal(rs, want_residual), "residual must be the fp32 sum rounded once"
    agree_sum = (xs == from_sum).float().mean().item()
    agree_rounded = (xs == from_rounded).float().mean().item()
    assert (from_sum != from_rounded).float().mean().item() > 0.1, "the inputs no longer tell the recipes apart"
    assert agree_sum > 0.99 and agree_sum > agree_rounded + 0.05, (agree_sum, agree_rounded)


def test_native_fp32_is_the_recipe_bit_for_bit():
    fn = row_fn("rms_norm", "native")
    x, w = randn((4, 4096), torch.float32, seed=5), weight(4096, torch.float32)
    assert torch.equal(fn(x, w, 1e-6), x * fp32_inv_rms(x, 1e-6) * w)


# ------------------------------------------------------------------ against the float64 oracle

SHAPES = [(1, 4096), (3, 4097), (5, 1001), (2, 8), (1, 1), (2, 3, 520)]


@pytest.mark.parametrize("backend", NUMERIC_ROWS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rms_norm_matches_the_oracle(backend, dtype, shape):
    fn = row_fn("rms_norm", backend)
    x, w = randn(shape, dtype, scale=4.0), weight(shape[-1], dtype)
    out = fn(x, w, 1e-6)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close(out, oracle("rms_norm")(x.cpu().double(), w.cpu().double(), 1e-6), dtype, f"{backend} {shape}")


@pytest.mark.parametrize("backend", NUMERIC_ROWS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fused_add_rms_norm_matches_the_oracle_in_place(backend, dtype, shape):
    fn = row_fn("fused_add_rms_norm", backend)
    x, r, w = randn(shape, dtype, seed=6, scale=2.0), randn(shape, dtype, seed=7, scale=2.0), weight(shape[-1], dtype)
    want = oracle("fused_add_rms_norm")(x.cpu().double(), r.cpu().double(), w.cpu().double(), 1e-6)
    x_ptr, r_ptr = x.data_ptr(), r.data_ptr()
    assert fn(x, r, w, 1e-6) is None
    assert x.data_ptr() == x_ptr and r.data_ptr() == r_ptr  # in place: the caller's tensors hold the results
    n = x.numel()
    assert_close(r, want[:n].view(shape), dtype, f"{backend} residual {shape}")
    assert_close(x, want[n:].view(shape), dtype, f"{backend} x {shape}")


@pytest.mark.parametrize("backend", NUMERIC_ROWS)
def test_empty_inputs_return_empty_results(backend):
    for hidden in (4096, 0):
        x, w = randn((0, hidden), torch.bfloat16), weight(hidden, torch.bfloat16)
        out = row_fn("rms_norm", backend)(x, w, 1e-6)
        assert out.shape == (0, hidden) and out.dtype == torch.bfloat16
        assert row_fn("fused_add_rms_norm", backend)(x, x.clone(), w, 1e-6) is None


@pytest.mark.parametrize("backend", NUMERIC_ROWS)
def test_eps_is_used(backend):
    fn = row_fn("rms_norm", backend)
    x, w = randn((4, 256), torch.float32, scale=0.05), weight(256, torch.float32)
    for eps in (1e-6, 0.1):
        assert_close(fn(x, w, eps), oracle("rms_norm")(x.cpu().double(), w.cpu().double(), eps), torch.float32,
                     f"eps={eps}")
    assert not torch.allclose(fn(x, w, 0.1), fn(x, w, 1e-6))


@pytest.mark.parametrize("backend", NUMERIC_ROWS)
def test_rms_norm_writes_into_out(backend):
    fn = row_fn("rms_norm", backend)
    x, w = randn((3, 4097), torch.float16), weight(4097, torch.float16)
    out = torch.full_like(x, float("nan"))
    assert fn(x, w, 1e-6, out=out) is out
    assert torch.equal(out, fn(x, w, 1e-6))


def test_triton_wide_rows_take_two_passes(monkeypatch):
    """Rows wider than MAX_ONE_PASS are read twice in chunks; force that path on a small row."""
    triton_mod = pytest.importorskip("rapid_llm.kernels.ops.norm.rms_norm.triton")
    row_fn("rms_norm", "triton")
    monkeypatch.setattr(triton_mod, "MAX_ONE_PASS", 64)
    monkeypatch.setattr(triton_mod, "CHUNK", 64)
    x, r, w = randn((3, 300), torch.float32, seed=8), randn((3, 300), torch.float32, seed=9), weight(300, torch.float32)
    assert_close(triton_mod.rms_norm(x, w, 1e-6), oracle("rms_norm")(x.cpu().double(), w.cpu().double()),
                 torch.float32, "two-pass rms_norm")
    want = oracle("fused_add_rms_norm")(x.cpu().double(), r.cpu().double(), w.cpu().double())
    from rapid_llm.kernels.ops.norm.fused_add_rms_norm.triton import fused_add_rms_norm

    fused_add_rms_norm(x, r, w, 1e-6)
    assert_close(torch.cat([r.flatten(), x.flatten()]), want, torch.float32, "two-pass fused_add_rms_norm")


# ------------------------------------------------------------------ bad inputs

@pytest.mark.parametrize("backend", ROWS)
@pytest.mark.parametrize("make, match", [
    (lambda: (randn((2, 8), torch.float32), weight(7, torch.float32)), r"rms_norm: weight must be \[8\]"),
    (lambda: (randn((2, 8), torch.float32), randn((2, 8), torch.float32)), r"rms_norm: weight must be \[8\]"),
    (lambda: (randn((2, 8), torch.float32), weight(8, torch.float16)), r"rms_norm: weight must have x's dtype"),
    (lambda: (randn((), torch.float32), weight(1, torch.float32)), r"rms_norm: x must have a hidden dimension"),
])
def test_rms_norm_bad_inputs_raise(backend, make, match):
    with pytest.raises(ValueError, match=match):
        row_fn("rms_norm", backend)(*make(), 1e-6)


@pytest.mark.parametrize("backend", ROWS)
def test_rms_norm_bad_out_raises(backend):
    x, w = randn((2, 8), torch.float32), weight(8, torch.float32)
    with pytest.raises(ValueError, match=r"rms_norm: out must match x's shape and dtype"):
        row_fn("rms_norm", backend)(x, w, 1e-6, out=torch.empty(2, 8, dtype=torch.float16, device=device()))


@pytest.mark.parametrize("backend", ROWS)
@pytest.mark.parametrize("make, match", [
    (lambda: (randn((2, 8), torch.float32), randn((2, 7), torch.float32), weight(8, torch.float32)),
     r"fused_add_rms_norm: residual must match x's shape and dtype"),
    (lambda: (randn((2, 8), torch.float32), randn((2, 8), torch.float16), weight(8, torch.float32)),
     r"fused_add_rms_norm: residual must match"),
    (lambda: (randn((2, 8), torch.float32), randn((2, 8), torch.float32), weight(4, torch.float32)),
     r"fused_add_rms_norm: weight must be \[8\]"),
])
def test_fused_add_rms_norm_bad_inputs_raise_and_change_nothing(backend, make, match):
    x, r, w = make()
    x0, r0 = x.clone(), r.clone()
    with pytest.raises(ValueError, match=match):
        row_fn("fused_add_rms_norm", backend)(x, r, w, 1e-6)
    assert torch.equal(x, x0) and torch.equal(r, r0)


def test_triton_refuses_views_without_one_row_stride():
    """A transposed x has no contiguous last dim: no row stride describes it (row strides: test_rms_norm_rows.py)."""
    x = randn((8, 16), torch.float32).t()
    with pytest.raises(ValueError, match=r"rms_norm: x must have a contiguous last dim and one row stride, got a "
                                         r"strided view \[16, 8\] with strides \[1, 16\]"):
        row_fn("rms_norm", "triton")(x, weight(8, torch.float32), 1e-6)
    with pytest.raises(ValueError, match=r"fused_add_rms_norm: x must have a contiguous last dim and one row stride"):
        row_fn("fused_add_rms_norm", "triton")(x, x.clone(), weight(8, torch.float32), 1e-6)
    with pytest.raises(ValueError, match=r"rms_norm: contiguous tensors only, weight is a strided view"):
        row_fn("rms_norm", "triton")(randn((2, 8), torch.float32), weight(16, torch.float32)[::2], 1e-6)


def test_native_takes_strided_views():
    x, w = randn((8, 16), torch.float32), weight(8, torch.float32)
    xt = x.t()  # [16, 8], strided
    native = row_fn("rms_norm", "native")
    assert_close(native(xt, w, 1e-6), oracle("rms_norm")(xt.double(), w.double(), 1e-6), torch.float32, "view")
    r = randn((16, 8), torch.float32, seed=3)
    xc, rs, rc = xt.contiguous(), r.clone(), r.clone()
    row_fn("fused_add_rms_norm", "native")(xt, rs, w, 1e-6)  # writes through the view into x
    row_fn("fused_add_rms_norm", "native")(xc, rc, w, 1e-6)
    assert torch.equal(rs, rc)  # the sums are elementwise: the same bits
    assert_close(x.t(), oracle("rms_norm")(rc.double(), w.double(), 1e-6), torch.float32, "fused view")


# ------------------------------------------------------------------ through the op

def test_eps_is_required_by_every_row():
    """A CUDA launcher has no default arguments, so no row may have one: a call means the same on every row."""
    for op in ("rms_norm", "fused_add_rms_norm"):
        for backend in ("native", "triton"):
            assert inspect.signature(row_fn(op, backend)).parameters["eps"].default is inspect.Parameter.empty


def test_ops_dispatch_and_fused_returns_none():
    import rapid_llm.kernels as K

    x, w = randn((3, 64), torch.bfloat16), weight(64, torch.bfloat16)
    assert_close(K.rms_norm(x, w, 1e-6), oracle("rms_norm")(x.cpu().double(), w.cpu().double(), 1e-6), torch.bfloat16,
                 "K.rms_norm")
    r = randn((3, 64), torch.bfloat16, seed=4)
    want = oracle("fused_add_rms_norm")(x.cpu().double(), r.cpu().double(), w.cpu().double(), 1e-6)
    assert K.fused_add_rms_norm(x, r, w, 1e-6) is None
    assert_close(torch.cat([r.flatten(), x.flatten()]), want, torch.bfloat16, "K.fused_add_rms_norm")


# ---------------------------------------------------------------- the CUDA rows on CPU: build and refuse


needs_toolchain = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                     reason="the fast path needs g++ and the CUDA toolkit's headers (nvcc)")

RMS, FUSED = "jit/rms_norm", "jit/fused_add_rms_norm"


def launcher(row: str):
    return spec.get_row(row).target.launcher()


@needs_toolchain
def test_sources_build_and_refuse_cpu_tensors():
    rms, fused = launcher(RMS), launcher(FUSED)
    x, w = torch.randn(2, 8), torch.ones(8)
    with pytest.raises(ValueError, match=r"^rms_norm: CUDA tensors only"):
        rms(torch.empty_like(x), x, w, 1e-6)
    with pytest.raises(ValueError, match=r"^fused_add_rms_norm: CUDA tensors only"):
        fused(x, x.clone(), w, 1e-6)


def test_rows_declare_their_out_rule():
    assert spec.get_row(RMS).target.out == "like_input"
    assert spec.get_row(FUSED).target.out == "none"


# ---------------------------------------------------------------- the Gluon row on CPU: filtered, and compiled

GLUON = "gluon/rms_norm"


def test_gluon_row_is_filtered_on_cpu_with_the_reason():
    """Gluon has no interpreter: explain names that (or Triton's missing Gluon), never a Triton reason."""
    import rapid_llm.kernels as K
    from rapid_llm.kernels.toolchain import gluon_support

    verdict = K.explain("rms_norm", dtype="bf16", device="cpu", numel=4096).verdict(GLUON)
    assert verdict.backend == "gluon" and verdict.verdict == "filtered"
    installed = gluon_support.installed()
    assert verdict.reason == (gluon_support.NO_INTERPRETER if installed else installed.reason)


def test_gluon_row_is_declared_for_hopper_and_verified_on_a_gpu():
    row = spec.get_row(GLUON)
    assert (row.backend, row.min_sm, row.devices, row.golden.verified) == ("gluon", 90, ("cuda",), True)
    assert row.golden.baseline == "native/rms_norm" and row.takes("rows")


def test_gluon_row_loads_on_cpu_and_refuses_cpu_tensors():
    """Its module imports without a GPU (a @gluon.jit kernel compiles at its first launch, not at import); a direct
    call with CPU tensors gets a ValueError naming the op, never a driver error."""
    pytest.importorskip("triton.experimental.gluon")
    fn = spec.get_row(GLUON).load()
    with pytest.raises(ValueError, match=r"^rms_norm: the Gluon row runs on cuda tensors, got cpu"):
        fn(torch.randn(2, 8), torch.ones(8), 1e-6)


#: The Gluon kernel compiled for sm_90 without a GPU (rapid_llm.kernels.inspection.offline, in a process without
#: Triton's interpreter), at the launch shapes the row picks (a one-pass row, a masked tail, a two-pass row):
#: ptxas's report of Triton's own ptxas, the IR's layout, the PTX's accesses.
_COMPILE_GLUON_FOR_SM90 = textwrap.dedent("""
import json
from rapid_llm.kernels.inspection.offline import compile_for
from rapid_llm.kernels.ops.norm.rms_norm import gluon

names = ("x_ptr", "w_ptr", "out_ptr", "x_stride", "out_stride", "hidden", "eps")
found = []
for dt, size, hidden in (("bf16", 2, 4096), ("fp16", 2, 4097), ("fp32", 4, 65536)):
    shape = gluon.launch_shape(hidden, size)
    sig = dict(zip(names, ("*" + dt, "*" + dt, "*" + dt, "i64", "i64", "i32", "fp32")))
    aligned = [n for i, n in enumerate(names[:6]) if i < 5 or hidden % 16 == 0]  # what Triton's launcher sees
    result = compile_for(gluon._rms_norm_kernel, sig, shape, arch=90, num_warps=shape["WARPS"], aligned=aligned)
    [symbol] = result.kernels()
    facts = result.facts[symbol]
    found.append({"dtype": dt, "hidden": hidden, "shape": shape, "registers": facts.registers,
                  "spills": facts.spills, "v4": result.code(symbol, "ptx").count("ld.global.v4"),
                  "layout": f"sizePerThread = [{shape['VEC']}]" in result.code(symbol, "ttgir")})
print(json.dumps(found))
""")


def test_gluon_kernel_compiles_for_sm90_with_16_byte_accesses_and_no_spills():
    pytest.importorskip("triton.backends.nvidia")
    from rapid_llm.kernels.toolchain import gluon_support

    if not gluon_support.installed():
        pytest.skip(gluon_support.installed().reason)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", _COMPILE_GLUON_FOR_SM90], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    kernels = {(k["dtype"], k["hidden"]): k for k in json.loads(out.stdout.strip().splitlines()[-1])}
    for k in kernels.values():
        assert 0 < k["registers"] <= 255 and k["spills"] == 0 and k["layout"], k
    assert kernels["bf16", 4096]["v4"] > 0 and kernels["fp32", 65536]["v4"] > 0  # 16-byte loads where aligned
    assert kernels["fp16", 4097]["v4"] == 0 and kernels["fp16", 4097]["shape"]["ONE_PASS"]  # the masked tail
    assert not kernels["fp32", 65536]["shape"]["ONE_PASS"]


@pytest.mark.parametrize("hidden", [1, 8, 64, 1000, 4096, 4097, 16384, 16385, 65536])
@pytest.mark.parametrize("size", [2, 4])
def test_gluon_launch_shape_gives_16_byte_accesses_that_fit_the_block(hidden, size):
    pytest.importorskip("triton.experimental.gluon")
    from rapid_llm.kernels.ops.norm.rms_norm import gluon

    shape = gluon.launch_shape(hidden, size)
    assert shape["VEC"] * size == 16
    assert shape["VEC"] * 32 * shape["WARPS"] <= shape["BLOCK"]  # one layout tile never exceeds the block
    assert shape["ONE_PASS"] == (hidden <= gluon.MAX_ONE_PASS)
    assert shape["BLOCK"] >= hidden if shape["ONE_PASS"] else shape["BLOCK"] == gluon.CHUNK
