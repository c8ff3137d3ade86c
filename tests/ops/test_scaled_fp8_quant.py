"""scaled_fp8_quant: every row that runs here against the float64 oracle in the quantised-output mode, over
vLLM's test_fp8_quant.py matrix (hidden 17, 1024-1026, 5137, 8193; tokens 1 and 7, and 4096 on a GPU),
each form (dynamic per token, per tensor, 1x128 groups; static), tails and empty inputs; the floor's
special values (all-zero rows, NaN, infinity, the clamp); and the errors a bad call gets.

On CPU the rows are the native floor only: the Triton row's probe refuses Triton's interpreter, whose
float32 -> fp8 cast is wrong (a tripwire below says when it is fixed). On a GPU the Triton and CUDA rows run
too; vLLM's whole matrix, CUDA-graph capture and the op under torch.compile are in
tests/gpu/ops/test_scaled_fp8_quant.py. That every row passes verify and holds its record is
tests/contract/test_rows.py's.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch import custom_ops
from rapid_llm.kernels.ops.quant.scaled_fp8_quant import reference as R
from rapid_llm.kernels.ops.quant.scaled_fp8_quant.native import MIN_SCALE
from rapid_llm.kernels.registry import spec
from tests.reference import assert_by_compare_mode
from tests.rows import runnable_rows

OP = "scaled_fp8_quant"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: The forms: (label, groups per token or None for per tensor, static)
FORMS = (("per token", 1, False), ("per tensor", None, False), ("1x128 groups", "g128", False),
         ("static per tensor", None, True))


def make_args(tokens: int, hidden: int, dtype: torch.dtype, device: torch.device, groups, is_static: bool,
              seed: int = 0, rand: bool = True) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand((tokens, hidden), generator=gen) + 1e-6 if rand else torch.randn((tokens, hidden), generator=gen)
    x = x.to(dtype=dtype, device=device)
    if groups == "g128":
        groups = hidden // 128
    if is_static:
        scale = torch.tensor([0.002], dtype=torch.float32) if groups is None else \
            torch.rand((tokens, groups), generator=gen) * 0.004 + 0.0005
        return R.static(x, scale)
    return R.dynamic(x, groups)


def check(fn, args: tuple) -> dict[str, int]:
    """The quantised-output rule, element by element (values first, then scales, in the flat result)."""
    n_values = args[1].numel()
    return assert_by_compare_mode(OP, fn, args,
                                  lambda i: f"value {i}" if i < n_values else f"scale {i - n_values}")


@pytest.fixture(params=[row.name for row in runnable_rows(OP)])
def row(request):
    """The rows that run here (collected so: a CPU run does not list the CUDA row's matrix as skipped cases;
    tests/contract/test_rows.py skips it once, with the reason)."""
    return spec.get_row(request.param).load()


#: vLLM's hidden sizes by form, 1x128 groups only where the hidden size is a multiple of 128.
VLLM_FORMS = [(hidden, form) for hidden in R.VLLM_HIDDEN for form in FORMS if form[1] != "g128" or hidden % 128 == 0]


@pytest.mark.parametrize(("hidden", "form"), VLLM_FORMS, ids=[f"{h}-{f[0]}" for h, f in VLLM_FORMS])
@pytest.mark.parametrize("tokens", R.VLLM_TOKENS[:2])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_vllm_matrix(row, device, dtype, tokens, hidden, form):
    _, groups, is_static = form
    counts = check(row, make_args(tokens, hidden, dtype, device, groups, is_static))
    assert counts["values further off"] == 0 and counts["scales not exact"] == 0


@pytest.mark.parametrize("shape", [(1, 1), (1, 4097), (3, 4097), (0, 64), (2, 3, 256)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_tails_empty_and_leading_dims(row, device, dtype, shape, form):
    _, groups, is_static = form
    if groups == "g128" and shape[-1] % 128:
        groups = 1
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen).mul_(5).to(dtype=dtype, device=device)
    g = shape[-1] // 128 if groups == "g128" else groups
    if is_static:
        args = R.static(x, torch.tensor([0.01]))
    else:
        args = R.dynamic(x, g)
    check(row, args)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: platform.dtype_name(d))
def test_all_zero_rows_get_the_floor_and_zeros(row, device, dtype):
    x = torch.zeros((3, 256), dtype=dtype, device=device)
    x[1] = 1.0
    out, _, scales, _ = args = R.dynamic(x, 1)
    assert row(*args) is None
    assert scales[0, 0].item() == MIN_SCALE == scales[2, 0].item()
    assert scales[1, 0].item() == pytest.approx(1 / 448, rel=1e-7)
    assert out.float()[0].abs().sum().item() == 0 and out.float()[1].eq(448).all()
    per_tensor = R.dynamic(torch.zeros((2, 64), dtype=dtype, device=device), None)
    row(*per_tensor)
    assert per_tensor[2].item() == MIN_SCALE and not torch.isnan(per_tensor[0].float()).any()


def test_min_scale_is_vllms_floor():
    assert MIN_SCALE == float(torch.tensor(1.0) / torch.tensor(448.0 * 512.0))
    assert MIN_SCALE == pytest.approx(1 / 229376, rel=1e-7)


def test_nan_is_left_out_of_amax_and_stays_nan(row, device):
    x = torch.tensor([[1.0, math.nan, -2.0, 0.5]], device=device)
    out, _, scales, _ = args = R.dynamic(x, 1)
    row(*args)
    assert scales.item() == pytest.approx(2.0 / 448, rel=1e-7)
    q = out.float()[0]
    assert torch.isnan(q[1]) and q[2].item() == -448.0


def test_static_scale_clamps_past_448(row, device):
    x = torch.tensor([[1.0, -3.0, 100.0, math.inf]], device=device)
    args = R.static(x, torch.tensor([0.005]))
    row(*args)
    assert args[0].float().tolist()[0] == [192.0, -448.0, 448.0, 448.0]
    assert args[2].item() == pytest.approx(0.005)  # read, not written


# ------------------------------------------------------------------ bad calls


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: (a[0].float(), *a[1:]), "out must be float8_e4m3fn"),
    (lambda a: (a[0], a[1].double(), *a[2:]), "x must be bf16, fp16 or fp32"),  # the floor's words, every path
    (lambda a: (a[0], a[1], a[2].double(), a[3]), "scales must be float32"),
    (lambda a: (a[0], a[1], torch.empty((4, 3)), a[3]), "G dividing H"),
    (lambda a: (a[0], a[1], torch.empty((5, 1)), a[3]), "x's leading dims"),
    (lambda a: (a[0][:, :8], *a[1:]), "out must have x's shape"),
    (lambda a: (*a[:3], 1), "static must be a bool"),
])
def test_bad_calls_name_the_op_and_the_problem(change, message):
    args = change(R.dynamic(torch.randn(4, 16)))
    with pytest.raises((ValueError, TypeError), match=f"scaled_fp8_quant'?:? .*{message}"):
        K.scaled_fp8_quant(*args)


def test_the_op_dispatches_and_is_a_custom_op():
    args = R.dynamic(torch.randn(4, 256, dtype=torch.bfloat16))
    assert K.scaled_fp8_quant(*args) is None
    assert str(custom_ops.torch_op(OP).default._schema) == \
        "rapid_llm::scaled_fp8_quant(Tensor(a!) output, Tensor x, Tensor(b!) scales, bool static) -> ()"
    out2, x, scales2, _ = R.dynamic(args[1].clone())
    torch.ops.rapid_llm.scaled_fp8_quant(out2, x, scales2, False)
    assert torch.equal(out2.view(torch.uint8), args[0].view(torch.uint8)) and torch.equal(scales2, args[2])


@pytest.mark.parametrize("is_static", [False, True])
def test_the_custom_op_writes_what_its_schema_says(is_static):
    """What opcheck's schema test would check, were torch.allclose defined for fp8: the op writes output and
    (dynamic) scales, marked (a!) and (b!), and nothing else; static scales are read only (a conservative mark)."""
    x = torch.randn(4, 256)
    args = R.static(x, torch.tensor([0.01])) if is_static else R.dynamic(x, 2)
    before = [a._version if isinstance(a, torch.Tensor) else None for a in args]
    x_bits = x.clone()
    torch.ops.rapid_llm.scaled_fp8_quant(*args)
    moved = [a._version != v if v is not None else None for a, v in zip(args, before)]
    assert moved == [True, False, not is_static, None]
    assert torch.equal(args[1], x_bits)
    schema = custom_ops.torch_op(OP).default._schema
    assert [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments] == [True, False, True, False]


def test_triton_row_on_cpu_is_filtered_with_the_reason():
    row = spec.get_row("triton/scaled_fp8_quant")
    avail = row.probe(torch.device("cpu"))
    assert not avail and "interpreter" in avail.reason and "7.75" in avail.reason


def test_interpreter_fp8_cast_is_still_wrong():
    """The reason the Triton row is off on CPU: when this fails, Triton's interpreter rounds fp8 right and the
    row's probe can let it run there."""
    triton = pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("checks Triton's CPU interpreter")
    import triton.language as tl

    @triton.jit
    def cast(x_ptr, o_ptr):
        tl.store(o_ptr, tl.load(x_ptr).to(tl.float8e4nv))

    x = torch.tensor([7.75])
    o = torch.empty(1, dtype=torch.float8_e4m3fn)
    cast[(1,)](x, o)
    assert o.float().item() != 8.0, "Triton's interpreter now casts to fp8 correctly: enable the Triton row on CPU"


_COMPILE_FOR_SM90 = textwrap.dedent("""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile
    from rapid_llm.kernels.ops.quant.scaled_fp8_quant import triton as Q

    target = GPUTarget("cuda", 90, 32)
    for dt in ("bf16", "fp16", "fp32"):
        p = "*" + dt
        common = {"x_ptr": p, "out_ptr": "*fp8e4nv", "s_ptr": "*fp32", "MIN": "constexpr", "STATIC": "constexpr"}
        for one_pass in (True, False):
            for static in (True, False):
                sig = dict(common, n_groups="i32", size="i32", ROWS="constexpr", BLOCK="constexpr", ONE_PASS="constexpr")
                compile(ASTSource(Q._groups_kernel, sig, constexprs={"MIN": Q.MIN_SCALE, "ROWS": 4, "BLOCK": 1024,
                                                                     "ONE_PASS": one_pass, "STATIC": static}),
                        target=target)
        compile(ASTSource(Q._partial_amax_kernel, {"x_ptr": p, "partial_ptr": "*fp32", "n": "i32",
                                                   "BLOCK": "constexpr"}, constexprs={"BLOCK": 4096}), target=target)
        sig = dict(common, partial_ptr="*fp32", n="i32", n_partials="i32", BLOCK="constexpr", PBLOCK="constexpr")
        ptx = compile(ASTSource(Q._tensor_kernel, sig, constexprs={"MIN": Q.MIN_SCALE, "BLOCK": 4096, "PBLOCK": 1024,
                                                                   "STATIC": False}), target=target).asm["ptx"]
        assert "cvt.rn.satfinite.e4m3x2.f32" in ptx, "no hardware fp8 cast (round to nearest even, saturating)"
        assert "div.rn.f32" in ptx, "the scale's division is not IEEE-rounded"
    print("ok")
""")


def test_triton_kernels_compile_for_sm90_with_the_hardware_cast():
    """What the CPU cannot run it can compile: every Triton kernel of the row for sm_90, its fp8 cast the
    hardware's saturating round-to-nearest-even and its scale an IEEE division."""
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, not the interpreter
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    done = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90], capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_a_call_s_form_is_read_from_its_scales_and_never_raises():
    """What dispatch keys on (OpDecl.form_of): each form its own figures; a bad call is the rows' to name."""
    from rapid_llm.kernels.ops.quant.scaled_fp8_quant.reference import FORMS, dynamic, form_of, static

    x = torch.randn(3, 256)
    assert form_of(*dynamic(x, 1)) is None  # per token: the form the bench case times
    assert [form_of(*dynamic(x, None)), form_of(*dynamic(x, 2)), form_of(*static(x, torch.tensor([0.5])))] == \
        list(FORMS)
    assert form_of(None, "not a tensor", 3, True) is None and form_of() is None
