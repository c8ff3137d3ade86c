"""Every declared op is a torch custom op, and K.<op> traces as it under torch.compile.

torch.library.opcheck runs over each op's reference cases (every case in fp32, the first two in the half
dtypes; every case of every dtype on CUDA in the GPU suite), on CPU through the native rows (dispatch does not serve Triton's interpreter; CPU Inductor cannot run Triton kernels
anyway). A Llama-style decoder layer built from K ops (rapid_llm.models.llama) compiles with
fullgraph=True and matches eager. The Triton rows' kernels compile as Inductor compiles them: fp64
scalars, fp fusion on (checked on CPU by compiling for sm_90). On a GPU, in
tests/gpu/contract/test_custom_ops.py: the rows themselves compiled under torch.compile, the layer compiled
on CUDA in every dtype, and the custom ops' C kernels.
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.dispatch import c_kernels, custom_ops
from rapid_llm.kernels.verification import golden
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference, declare_op
from rapid_llm.models.llama import LlamaConfig, LlamaLayer
from tests.reference import assert_close_to_ref

HAS_CUDA = torch.cuda.is_available()
DTYPES = ("bf16", "fp16", "fp32")
_ids = itertools.count()
#: The shipped ops' schemas: what derivation must give (a change here changes every compiled graph's ops).
SHIPPED = {
    "scale": "scale(Tensor input, float factor) -> Tensor",
    "rms_norm": "rms_norm(Tensor x, Tensor weight, float eps) -> Tensor",
    "fused_add_rms_norm": "fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()",
    "silu_and_mul": "silu_and_mul(Tensor x) -> Tensor",
    "rotary_embedding": ("rotary_embedding(Tensor positions, Tensor(a!) q, Tensor(b!) k, int head_size, "
                         "Tensor cos_sin_cache, bool is_neox) -> ()"),
}


def _fresh(prefix: str = "t_custom") -> str:
    return f"{prefix}{next(_ids)}_{os.getpid()}"


def _ref(make_inputs=None) -> Reference:
    make_inputs = make_inputs or (lambda shape, dtype, device, gen: (torch.randn(shape, generator=gen).to(dtype), 0.5))
    return Reference(make_inputs=make_inputs, oracle=lambda x, *a: x.double())


def _bench(numel, dtype, device) -> CaseArgs:
    return CaseArgs((torch.ones(numel, dtype=dtype, device=device), 0.5))


# ------------------------------------------------------------------ registration


def test_every_declared_op_is_the_custom_op_of_its_name():
    for op in spec.all_ops():
        assert custom_ops.why_not(op) == "", op
        assert custom_ops.torch_op(op) is getattr(torch.ops.rapid_llm, op)
    for op, text in SHIPPED.items():
        assert custom_ops._bindings[op].schema.text == text
        assert str(getattr(torch.ops.rapid_llm, op).default._schema) == f"rapid_llm::{text}"
    fakes = {op: custom_ops._bindings[op].fake for op in SHIPPED}
    assert fakes == {"scale": "like_input", "rms_norm": "like_input", "fused_add_rms_norm": "none",
                     "silu_and_mul": "half_last_dim", "rotary_embedding": "none"}
    # out= rows get an .out overload (write out, return nothing); in-place ops have none
    assert {op for op in SHIPPED if custom_ops._bindings[op].schema.has_out} == {"scale", "rms_norm", "silu_and_mul"}


def _has_nan(result) -> bool:
    if isinstance(result, tuple):  # an op with several outputs (moe_topk_gate: weights and ids)
        return any(_has_nan(t) for t in result)
    return isinstance(result, torch.Tensor) and result.is_floating_point() and bool(torch.isnan(result).any())


def _clone(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


#: On CPU, fp32 runs every reference case and the half dtypes their first two (a dtype changes the fake kernel's
#: and the schema's answers, not what the other cases test); AOT dispatch, nine tenths of opcheck's time (about
#: 0.2 s a case on CPU), runs on the first two cases and the last (the op's edge rows), since it checks the op's
#: registration under AOTAutograd's dynamic shapes, which a case's parameters do not change.
#: tests/gpu/contract/test_custom_ops.py runs every check on every case of every dtype on CUDA.
CPU_HALF_CASES = 2
CPU_AOT_CASES = (0, 1, -1)


def opcheck_reference_cases(op: str, dtype: str, device: torch.device, limit: int | None = None,
                            aot_cases: tuple[int, ...] | None = None) -> None:
    """opcheck (schema, fake, autograd registration, AOT dispatch) on the op's reference cases (the first ``limit``;
    AOT dispatch on those at the indexes ``aot_cases``, or on all)."""
    overloads = custom_ops.torch_op(op)
    tdtype = platform.torch_dtype(dtype)
    cases = golden.reference_cases(op, tdtype, device, golden.CPU_SIZES)[:limit]
    aot = set(range(len(cases))) if aot_cases is None else {i % len(cases) for i in aot_cases}
    for index, (label, args) in enumerate(cases):
        utils = ["test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"]
        if index not in aot:
            utils.remove("test_aot_dispatch_dynamic")
        if any(isinstance(a, torch.Tensor) and a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) for a in args):
            # torch's SchemaCheckMode compares arguments with torch.allclose, which has no fp8 kernel; the op's
            # own test checks what it writes (test_scaled_fp8_quant: test_..._writes_what_its_schema_says).
            utils.remove("test_schema")
        if _has_nan(overloads.default(*_clone(args))):
            # opcheck compares eager and AOT outputs with assert_close, which never equates NaN with NaN;
            # the finite cases check AOT dispatch, these check the rest.
            utils = [u for u in utils if u != "test_aot_dispatch_dynamic"]
        try:
            torch.library.opcheck(overloads.default, _clone(args), test_utils=utils)
        except Exception as exc:
            raise AssertionError(f"{op} {dtype} {label}: {exc}") from None
    if custom_ops._bindings[op].schema.has_out:
        label, args = cases[1]
        out = torch.empty_like(overloads.default(*_clone(args)))
        torch.library.opcheck(overloads.out, _clone(args), {"out": out})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(spec.all_ops()))
def test_opcheck_passes_on_the_reference_cases(op, dtype):
    opcheck_reference_cases(op, dtype, torch.device("cpu"), None if dtype == "fp32" else CPU_HALF_CASES, CPU_AOT_CASES)


def test_the_custom_op_dispatches_like_k_op_and_the_out_overload_writes_out():
    x = torch.randn(3, 16)
    w = torch.randn(16)
    torch.testing.assert_close(torch.ops.rapid_llm.rms_norm(x, w, 1e-6), K.rms_norm(x, w, 1e-6), rtol=0, atol=0)
    out = torch.full((3, 16), float("nan"))
    assert torch.ops.rapid_llm.rms_norm.out(x, w, 1e-6, out=out) is None
    torch.testing.assert_close(out, K.rms_norm(x, w, 1e-6), rtol=0, atol=0)
    a, r = torch.randn(3, 16), torch.randn(3, 16)
    b, s = a.clone(), r.clone()
    torch.ops.rapid_llm.fused_add_rms_norm(a, r, w, 1e-6)
    K.fused_add_rms_norm(b, s, w, 1e-6)
    assert torch.equal(a, b) and torch.equal(r, s)


# ------------------------------------------------------------------ the C kernel


@pytest.fixture
def c_kernel_on_cpu(monkeypatch):
    """Ops declared within get their C kernel on CPU, where CI runs: all of it but a launcher's call."""
    monkeypatch.setattr(c_kernels, "KEYS", ("CPU",))


def test_a_c_kernel_serves_through_its_python_kernel_and_raises_its_words(call_impl, c_kernel_on_cpu):
    name = _fresh("t_ck")

    def native(x, alpha):
        if alpha < 0:
            raise ValueError(f"{name}(): alpha must be >= 0, got {alpha}")
        return x * alpha

    declare_op(name, native=native, reference=_ref(), bench=_bench)
    assert c_kernels.why_not(name) == ""
    op = getattr(torch.ops.rapid_llm, name)
    x = torch.randn(4, 8)
    assert torch.equal(op(x, 2.0), x * 2)
    learned = c_kernels.learned(name)
    # the native row is no launcher: its key is learned as the Python kernel's (the portable dispatcher teaches nothing)
    assert [launcher for _, launcher in learned] == ([None] if call_impl == "compiled" else [])
    assert torch.equal(op(x, 3.0), x * 3) and c_kernels.learned(name) == learned
    with pytest.raises(RuntimeError, match=rf"ValueError: {name}\(\): alpha must be >= 0, got -1.0"):
        op(x, -1.0)
    assert torch.equal(op(x, 0.5), x * 0.5)  # an error leaves nothing behind
    torch.library.opcheck(op.default, (x, 0.5))
    assert torch.equal(torch.compile(lambda x: op(x, 2.0) + 1, fullgraph=True, backend="aot_eager")(x), x * 2 + 1)
    declare_op(name, native=lambda x, alpha: x * alpha + 1, reference=_ref(), bench=_bench, replace=True)
    assert c_kernels.learned(name) == []  # forgotten with the old rows
    assert torch.equal(op(x, 2.0), x * 2 + 1)


def test_a_c_kernel_writes_in_place_and_passes_every_kind(c_kernel_on_cpu):
    name = _fresh("t_ck_inplace")

    def native(x: torch.Tensor, y: torch.Tensor, times: int, negate: bool, alpha: float) -> None:
        x.add_(y * times * alpha * (-1 if negate else 1))

    make = lambda shape, dtype, device, gen: (torch.randn(shape, generator=gen).to(dtype),  # noqa: E731
                                              torch.randn(shape, generator=gen).to(dtype), 3, True, 0.5)
    declare_op(name, native=native, reference=_ref(make), bench=_bench)
    assert str(getattr(torch.ops.rapid_llm, name).default._schema).endswith(
        "(Tensor(a!) x, Tensor y, int times, bool negate, float alpha) -> ()")
    assert c_kernels.why_not(name) == ""
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    expected = x - y * 1.5
    assert getattr(torch.ops.rapid_llm, name)(x, y, 3, True, 0.5) is None
    torch.testing.assert_close(x, expected)


def test_ops_a_c_kernel_cannot_serve_keep_their_python_kernel(c_kernel_on_cpu):
    name = _fresh("t_ck_pair")
    declare_op(name, native=lambda x: (x * 2, x + 1), reference=_ref(lambda s, d, dev, g: (torch.randn(s).to(d),)),
               bench=_bench)
    assert "returns (Tensor, Tensor)" in c_kernels.why_not(name)
    x = torch.randn(3)
    a, b = getattr(torch.ops.rapid_llm, name)(x)
    assert torch.equal(a, x * 2) and torch.equal(b, x + 1)
    assert "forms" in c_kernels.why_not("scaled_fp8_quant") or c_kernels.why_not("scaled_fp8_quant") == "no CUDA here"


# ------------------------------------------------------------------ tracing


def _graph_ops(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "rapid_llm" in str(n.target)]


def test_k_ops_trace_as_their_custom_ops(call_impl):
    """K.<op> under Dynamo is one node of torch.ops.rapid_llm.<op> (out= through .out), on both call paths."""
    def fn(x, r, w):
        K.fused_add_rms_norm(x, r, w, 1e-6)
        half = torch.empty(x.shape[0], x.shape[1] // 2)
        K.silu_and_mul(x, out=half)
        return K.scale(half, 2.0) + K.silu_and_mul(x) + K.rms_norm(x, w, 1e-6)[:, :8]

    x, r, w = torch.randn(3, 16), torch.randn(3, 16), torch.randn(16)
    explained = torch._dynamo.explain(fn)(x.clone(), r.clone(), w)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert _graph_ops(explained.graphs[0]) == [
        "rapid_llm.fused_add_rms_norm.default", "rapid_llm.silu_and_mul.out", "rapid_llm.scale.default",
        "rapid_llm.silu_and_mul.default", "rapid_llm.rms_norm.default"]
    eager_args, compiled_args = (x.clone(), r.clone(), w), (x.clone(), r.clone(), w)
    expected = fn(*eager_args)
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*compiled_args)
    assert torch.equal(got, expected)
    assert all(torch.equal(a, b) for a, b in zip(eager_args, compiled_args))  # in-place writes land too


def test_a_notebook_declared_op_is_a_custom_op_at_declaration(call_impl):
    name = _fresh("t_nb")
    declare_op(name, native=lambda x, alpha: x * alpha, reference=_ref(), bench=_bench)
    x = torch.randn(4, 8)
    assert custom_ops.why_not(name) == ""
    assert str(getattr(torch.ops.rapid_llm, name).default._schema) == f"rapid_llm::{name}(Tensor x, float alpha) -> Tensor"
    torch.library.opcheck(getattr(torch.ops.rapid_llm, name).default, (x, 0.5))
    op = getattr(K, name)
    explained = torch._dynamo.explain(lambda x: op(x, 3.0) + 1)(x)
    assert explained.graph_break_count == 0 and _graph_ops(explained.graphs[0]) == [f"rapid_llm.{name}.default"]
    # a re-run cell (replace=True, same schema) swaps what the custom op runs
    declare_op(name, native=lambda x, alpha: x * alpha + 1, reference=_ref(), bench=_bench, replace=True)
    assert torch.equal(getattr(torch.ops.rapid_llm, name)(x, 2.0), x * 2 + 1)
    assert torch.equal(torch.compile(lambda x: op(x, 2.0), fullgraph=True, backend="aot_eager")(x), x * 2 + 1)


def test_a_redeclared_schema_keeps_the_first_and_says_so(call_impl):
    name = _fresh("t_re")
    declare_op(name, native=lambda x, alpha: x * alpha, reference=_ref(), bench=_bench)
    three = _ref(lambda shape, dtype, device, gen: (torch.randn(shape, generator=gen).to(dtype), 0.5, 2))
    declare_op(name, native=lambda x, alpha, beta: x * alpha + beta, reference=three, bench=_bench, replace=True)
    assert f"torch.ops.rapid_llm.{name} keeps its first one" in custom_ops.why_not(name)
    x = torch.randn(4, 8)
    assert torch.equal(getattr(K, name)(x, 2.0, 1), x * 2 + 1)  # eager is unaffected
    with pytest.raises(RuntimeError, match="cannot redefine a schema"):
        getattr(torch.ops.rapid_llm, name)(x, 2.0)
    op = getattr(K, name)
    with pytest.raises(Exception, match="cannot redefine a schema"):  # fullgraph: the graph break names why
        torch.compile(lambda x: op(x, 2.0, 1) + 1, fullgraph=True, backend="eager")(x)
    assert torch.equal(torch.compile(lambda x: op(x, 2.0, 1) + 1, backend="eager")(x), x * 2 + 1 + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # back to the registered schema: a custom op again, silently
        declare_op(name, native=lambda x, alpha: x * alpha, reference=_ref(), bench=_bench, replace=True)
    assert custom_ops.why_not(name) == "" and torch.equal(getattr(torch.ops.rapid_llm, name)(x, 2.0), x * 2)


def test_an_op_without_a_derivable_schema_runs_eagerly_between_graphs(call_impl):
    name = _fresh("t_noschema")
    declare_op(name, native=lambda x: x * 2, reference=_ref(lambda *a: ()), bench=_bench)
    assert "make_inputs gives no example arguments" in custom_ops.why_not(name)
    with pytest.raises(spec.RegistryError, match="no example arguments"):
        custom_ops.torch_op(name)
    op = getattr(K, name)
    x = torch.randn(4)
    with pytest.raises(Exception, match="no example arguments"):
        torch.compile(lambda x: op(x) + 1, fullgraph=True, backend="eager")(x)
    assert torch.equal(torch.compile(lambda x: op(x) + 1, backend="eager")(x), x * 2 + 1)


def test_an_explicit_schema_serves_an_op_whose_example_cannot_run():
    name = _fresh("t_explicit")

    def broken_inputs(shape, dtype, device, gen):
        raise RuntimeError("needs a GPU")

    declare_op(name, native=lambda x, alpha: x.sum(-1) * alpha, reference=_ref(broken_inputs), bench=_bench,
               schema="(Tensor x, float alpha) -> Tensor")
    binding = custom_ops._bindings[name]
    assert binding.schema.text == f"{name}(Tensor x, float alpha) -> Tensor" and binding.fake == "native"
    torch.library.opcheck(getattr(torch.ops.rapid_llm, name).default, (torch.randn(3, 5), 2.0))


def test_derived_schemas_mark_writes_and_refuse_aliases():
    name = _fresh("t_inplace")
    make = _ref(lambda shape, dtype, device, gen: (torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)))
    declare_op(name, native=lambda a, b: [a.add_(b), None][1], reference=make, bench=_bench)
    assert custom_ops._bindings[name].schema.text == f"{name}(Tensor(a!) a, Tensor b) -> ()"
    alias = _fresh("t_alias")
    declare_op(alias, native=lambda x, alpha: x, reference=_ref(), bench=_bench)
    assert "returns (a view of) one of its inputs" in custom_ops.why_not(alias)


def test_registration_is_lazy_and_tracing_survives_a_late_dynamo_import():
    """Importing the package registers nothing and loads no Dynamo; an eager call neither; a later
    torch.compile (which imports Dynamo) still traces K ops as their custom ops."""
    code = textwrap.dedent("""
        import sys, torch
        import rapid_llm.kernels as K
        registered_at_import = "rapid_llm.kernels.dispatch.custom_ops" in sys.modules
        x, w = torch.randn(3, 16), torch.randn(16)
        y = K.rms_norm(x, w, 1e-6)
        print(registered_at_import, "torch._dynamo" in sys.modules, "triton" in sys.modules,
              hasattr(torch.ops.rapid_llm, "rms_norm"))
        f = torch.compile(lambda x, w: K.rms_norm(x, w, 1e-6) * 2, fullgraph=True, backend="eager")
        print(torch.equal(f(x, w), y * 2))
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "False", "False", "True", "True"], out.stdout + out.stderr[-3000:]


# ------------------------------------------------------------------ a decoder layer


def _layer_inputs(cfg: LlamaConfig, tokens: int, dtype: torch.dtype, device: torch.device) -> tuple:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, cfg.hidden, generator=gen).to(device=device, dtype=dtype)
    residual = torch.randn(tokens, cfg.hidden, generator=gen).to(device=device, dtype=dtype)
    positions = torch.randint(0, cfg.max_positions, (tokens,), generator=gen).to(device)
    return positions, x, residual


#: Compiled against eager: a few units in the last place of the dtype, at the tensor's scale. The K ops run the
#: same rows either way; Inductor may reduce the matmuls and attention in another order (measured on an H200:
#: fp32 out within 3 eps of its scale, fp16 within 0.2 eps, bf16 exact; aot_eager exact in all three).
ULPS = 8


def _check_layer(layer: LlamaLayer, args: tuple, backend: str, dtype: torch.dtype) -> None:
    """Compiled (fullgraph) and eager agree on the output, the residual and the in-place write of x."""
    eager_args = tuple(a.clone() if a is not None else None for a in args)
    compiled_args = tuple(a.clone() if a is not None else None for a in args)
    expected = layer(*eager_args)
    got = torch.compile(layer, fullgraph=True, backend=backend)(*compiled_args)
    for what, g, e in zip(("out", "residual", "x written in place"), (*got, compiled_args[1]),
                          (*expected, eager_args[1])):
        # verify's rule, each element judged against the tensor's largest magnitude (a reordered sum's error)
        magnitude = e.double().abs().max().expand(e.shape)
        assert_close_to_ref(g, e.double(), f"compiled layer, {what}", ulps=ULPS, magnitude=magnitude)


@pytest.mark.parametrize("residual", [False, True], ids=["first_layer", "chained"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_decoder_layer_traces_without_graph_breaks(dtype, residual):
    cfg = LlamaConfig()
    layer = LlamaLayer.random(cfg, dtype=dtype)
    positions, x, res = _layer_inputs(cfg, 7, dtype, torch.device("cpu"))
    args = (positions, x, res if residual else None)
    explained = torch._dynamo.explain(layer)(*(a.clone() if a is not None else None for a in args))
    assert explained.graph_break_count == 0, explained.break_reasons
    ops = sorted({t for g in explained.graphs for t in _graph_ops(g)})
    expected = ["rapid_llm.fused_add_rms_norm.default", "rapid_llm.rotary_embedding.default",
                "rapid_llm.silu_and_mul.default"] + ([] if residual else ["rapid_llm.rms_norm.default"])
    assert ops == sorted(expected)
    _check_layer(layer, args, "aot_eager", dtype)  # functionalization of the in-place ops, without Inductor


def test_decoder_layer_compiles_under_inductor_and_matches_eager():
    """Inductor on CPU (several tokens: the native fused_add_rms_norm traced inline crashed Inductor there;
    as a custom op it is opaque). CPU Inductor runs the native rows, never Triton."""
    cfg = LlamaConfig()
    layer = LlamaLayer.random(cfg, dtype=torch.float32)
    positions, x, _ = _layer_inputs(cfg, 7, torch.float32, torch.device("cpu"))
    _check_layer(layer, (positions, x, None), "inductor", torch.float32)


# ------------------------------------------------------------------ Triton rows under Inductor


_AS_INDUCTOR_COMPILES = textwrap.dedent("""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile
    from rapid_llm.kernels.ops.elementwise.scale.triton import _scale_kernel
    from rapid_llm.kernels.ops.norm.rms_norm.triton import _rms_norm_kernel
    from rapid_llm.kernels.ops.rope.rotary_embedding.triton import _rope_kernel

    target, fusion = GPUTarget("cuda", 90, 32), {"enable_fp_fusion": True}  # Inductor's defaults
    for dt in ("bf16", "fp16", "fp32"):
        p = "*" + dt
        compile(ASTSource(_scale_kernel, {"out_ptr": p, "in_ptr": p, "factor": "fp64", "n": "i64",
                                          "BLOCK": "constexpr"}, constexprs={"BLOCK": 4096}), target=target)
        for one_pass, add in ((True, False), (True, True), (False, False), (False, True)):
            sig = {"x_ptr": p, "res_ptr": p, "w_ptr": p, "out_ptr": p, "x_stride": "i32", "res_stride": "i32",
                   "out_stride": "i32", "hidden": "i32", "eps": "fp64",
                   "BLOCK": "constexpr", "ONE_PASS": "constexpr", "ADD_RESIDUAL": "constexpr"}
            compile(ASTSource(_rms_norm_kernel, sig, constexprs={"BLOCK": 1024, "ONE_PASS": one_pass,
                                                                  "ADD_RESIDUAL": add}), target=target)
        sig = {"pos_ptr": "*i64", "q_ptr": p, "k_ptr": p, "cache_ptr": "*fp32"}
        sig.update({n: "i32" for n in ("n_q_heads", "n_k_heads", "half", "max_pos", "pos_stride", "q_stride_t",
                                      "q_stride_h", "q_stride_e", "k_stride_t", "k_stride_h", "k_stride_e",
                                      "cache_stride_p", "cache_stride_e")})
        sig.update({n: "constexpr" for n in ("IS_NEOX", "BLOCK_H", "BLOCK_P", "PTX")})
        for neox in (True, False):
            rope = compile(ASTSource(_rope_kernel, sig, constexprs={"IS_NEOX": neox, "BLOCK_H": 4, "BLOCK_P": 64,
                                                                     "PTX": True}), target=target, options=fusion)
            assert "fma" not in rope.asm["ptx"], "rope's products must be rounded before the sum"
    print("ok")
""")


def test_triton_kernels_compile_as_inductor_compiles_them():
    """Inductor types a Python float kernel argument fp64 (Triton's own launcher: fp32) and compiles a user
    kernel with fp fusion on, whatever its launch asked. The kernels round scalars to fp32 first (tl.sqrt_rn
    takes fp32 only; the math is fp32), and rope rounds its products itself; checked by compiling for sm_90."""
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, not the interpreter
    out = subprocess.run([sys.executable, "-c", _AS_INDUCTOR_COMPILES], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.stdout.strip().endswith("ok"), out.stderr[-3000:]


@pytest.mark.parametrize("op", sorted(spec.all_ops()))
def test_every_floor_traces_whole_under_torch_compile(op):
    """A row is what torch.compile traces when it calls the row itself (the GPU tests compile the Triton rows
    so): its argument checks must not break the graph (an overlap check reads memory a traced tensor has
    not got)."""
    floor = next(r for r in spec.rows_for(op) if r.backend == "native")
    decl = spec.get_decl(op)
    args = decl.reference.make_inputs((4096,), torch.float32, "cpu", torch.Generator().manual_seed(0))
    call = decl.reference.call or (lambda fn, *a: fn(*a))
    fresh = lambda: [a.clone() if torch.is_tensor(a) else a for a in args]  # noqa: E731 - in-place ops write them
    torch._dynamo.reset()
    compiled = torch.compile(floor.load(), fullgraph=True, backend="eager")
    torch.testing.assert_close(call(compiled, *fresh()), call(floor.load(), *fresh()), rtol=0, atol=0,
                               equal_nan=True)
