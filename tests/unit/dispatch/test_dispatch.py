"""Dispatch: filters, ranking, caching and explain, with rows registered by the tests.

A real CUDA-graph capture, and strided CUDA inputs, are in tests/gpu/unit/dispatch/test_dispatch.py.
"""
from __future__ import annotations

import itertools

import pytest
import torch

from rapid_llm.kernels.dispatch import measurements
from rapid_llm.kernels.dispatch import dispatcher as dispatch
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.dispatch.dispatcher import explain
from rapid_llm.kernels.registry.spec import Availability, GoldenRecord, KernelSpec, RegistryError

VERIFIED = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/x")
_ids = itertools.count()

@pytest.fixture(autouse=True)
def serve_interpreter():
    """These tests use Triton-labelled rows on CPU tensors to check dispatch rules: let them serve."""
    from rapid_llm.kernels.toolchain import triton_support

    triton_support.serve_interpreter(True)
    yield
    triton_support.serve_interpreter(None)


def _impl(tag):
    def fn(x, *args, **kwargs):
        return tag, args, kwargs
    return fn


@pytest.fixture
def op(monkeypatch, tmp_path):
    """A fresh op name with its native row; every row added through ``add`` is removed afterwards."""
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path))
    name = f"t_op{next(_ids)}"
    added: list[str] = []

    def add(row_name, backend, **kw):
        kw.setdefault("target", _impl(row_name))
        kw.setdefault("devices", ("cpu", "cuda"))
        kw.setdefault("golden", VERIFIED)
        spec.register(KernelSpec(name=row_name, op=name, backend=backend, **kw))
        added.append(row_name)

    add(f"native/{name}", "native", priority=0)
    add.name = name
    yield add
    for row in added:
        spec.unregister(row)


X = torch.ones(8)


def test_priority_orders_rows(op):
    op(f"triton/{op.name}_lo", "triton", priority=1)
    op(f"triton/{op.name}_hi", "triton", priority=5)
    assert dispatch.resolve(op.name, X).name == f"triton/{op.name}_hi"


def test_unmeasured_loses_ties(op):
    op(f"jit/{op.name}_unm", "jit", priority=None)
    op(f"jit/{op.name}_zero", "jit", priority=0)
    assert dispatch.resolve(op.name, X).name == f"jit/{op.name}_zero"
    why = dispatch.explain(op.name, X).verdict(f"jit/{op.name}_unm").reason
    assert "priority 0 > -" in why


def test_backend_preference_breaks_equal_priority(op):
    op(f"triton/{op.name}", "triton")
    op(f"jit/{op.name}", "jit")
    assert dispatch.resolve(op.name, X).name == f"jit/{op.name}"
    assert "backend jit preferred over triton" in dispatch.explain(op.name, X).verdict(f"triton/{op.name}").reason


def test_native_is_the_floor_when_others_unmeasured(op):
    op(f"triton/{op.name}", "triton")
    assert dispatch.resolve(op.name, X).name == f"triton/{op.name}"


def test_measured_latency_outranks_static_priority(op):
    fast, slow = f"triton/{op.name}_fast", f"jit/{op.name}_slow"
    op(fast, "triton", priority=None)
    op(slow, "jit", priority=100)
    assert dispatch.resolve(op.name, X).name == slow
    measurements.record(op.name, fast, "cpu", "fp32", 8, 2.0)
    measurements.record(op.name, slow, "cpu", "fp32", 8, 5.0)
    e = dispatch.explain(op.name, X)
    assert e.chosen.name == fast and e.chosen.measured_us == 2.0
    assert "2.00 us vs 5.00 us measured (2.50x slower)" in e.verdict(slow).reason


def test_measured_native_can_win_small_sizes(op):
    op(f"triton/{op.name}", "triton")
    measurements.record(op.name, f"native/{op.name}", "cpu", "fp32", 8, 1.0)
    measurements.record(op.name, f"triton/{op.name}", "cpu", "fp32", 8, 20.0)
    assert dispatch.resolve(op.name, X).name == f"native/{op.name}"
    # a size bucket far from the measured one falls back to static ranking
    assert dispatch.resolve(op.name, torch.ones(1 << 20)).name == f"triton/{op.name}"


def test_unverified_rows_are_excluded(op):
    op(f"jit/{op.name}", "jit", golden=GoldenRecord(verified=False))
    e = dispatch.explain(op.name, X)
    assert e.chosen.name == f"native/{op.name}"
    assert e.verdict(f"jit/{op.name}").reason.startswith("golden unverified")


def test_missing_toolchain_is_filtered_with_its_reason(op):
    op(f"jit/{op.name}", "jit", available=lambda device=None: Availability(False, "nvcc not found"))
    e = dispatch.explain(op.name, X)
    assert e.chosen.name == f"native/{op.name}"
    v = e.verdict(f"jit/{op.name}")
    assert (v.verdict, v.reason) == ("filtered", "nvcc not found")


def test_plain_bool_probe_gets_a_reason(op):
    op(f"jit/{op.name}", "jit", available=lambda: False)
    assert "returned False" in dispatch.explain(op.name, X).verdict(f"jit/{op.name}").reason


def test_raising_probe_filters_its_row(op):
    def probe(device=None):
        raise OSError("disk on fire")
    op(f"jit/{op.name}", "jit", available=probe)
    assert dispatch.explain(op.name, X).verdict(f"jit/{op.name}").reason == "probe raised OSError: disk on fire"


def test_dtype_and_device_filters(op):
    op(f"triton/{op.name}_bf16", "triton", dtypes=("bf16",))
    op(f"jit/{op.name}_cuda", "jit", devices=("cuda",))
    e = dispatch.explain(op.name, X)
    assert e.verdict(f"triton/{op.name}_bf16").reason == "fp32 not in dtypes (bf16)"
    assert e.verdict(f"jit/{op.name}_cuda").reason == "cpu not in devices (cuda)"


def test_graph_unsafe_rows_are_filtered_while_capturing(op):
    op(f"jit/{op.name}", "jit", graph_safe=False)
    assert dispatch.resolve(op.name, X, capturing=False).name == f"jit/{op.name}"
    e = dispatch.explain(op.name, X, capturing=True)
    assert e.chosen.name == f"native/{op.name}"
    assert e.verdict(f"jit/{op.name}").reason.startswith("not graph safe")


def test_min_sm_filter_on_cuda_devices(op, monkeypatch):
    from rapid_llm.kernels import platform

    op(f"jit/{op.name}", "jit", min_sm=90)
    monkeypatch.setattr(platform, "sm_version", lambda device=None: 80)
    e = dispatch.explain(op.name, dtype=torch.float32, device="cuda", capturing=False)
    assert e.verdict(f"jit/{op.name}").reason == "needs sm_90+, device is sm_80"


def test_call_dispatches_and_caches(op, call_impl):
    op(f"triton/{op.name}", "triton")
    call = dispatch.get_op(op.name)
    assert (type(call) is dispatch.Op) == (call_impl == "portable")
    assert call(X, 2.0, out=None) == (f"triton/{op.name}", (2.0,), {"out": None})
    assert call.cached_entries() == 1
    call(X, 3.0)
    assert call.cached_entries() == 1
    call(torch.ones(4097), 3.0)  # another size class: another entry
    assert call.cached_entries() == 2


def test_a_strided_argument_or_out_goes_to_the_floor(op, call_impl):
    op(f"triton/{op.name}", "triton")
    call = dispatch.get_op(op.name)
    m = torch.ones(8, 8)
    assert call(m, 2.0)[0] == f"triton/{op.name}"
    assert call(m.t(), 2.0)[0] == f"native/{op.name}"
    assert call(m[::2], 2.0)[0] == f"native/{op.name}"
    assert call(m, m.t())[0] == f"native/{op.name}"  # a strided second tensor counts too
    assert call(m, 2.0, out=m.t())[0] == f"native/{op.name}"
    assert call(m, 2.0, out=m)[0] == f"triton/{op.name}"


def test_a_row_strided_call_reaches_a_row_that_declares_rows(op, call_impl):
    """x[:, :H] of a [T, 2H] buffer is "rows": a row declaring it answers; a view no single row stride
    describes (transposed, step-sliced, overlapping, non-uniform leading dims) still goes to the floor.
    Both call paths key the three layouts apart, so a cached "rows" answer never serves a strided call."""
    op(f"triton/{op.name}", "triton", layouts=("contiguous", "rows"))
    fast, floor = f"triton/{op.name}", f"native/{op.name}"
    call = dispatch.get_op(op.name)
    buf = torch.ones(8, 16)
    rows = buf[:, :8]  # [8, 8], row stride 16
    assert call(rows, 2.0)[0] == fast
    assert call(buf[:, ::2], 2.0)[0] == floor  # same dtype, device and size class, after a cached "rows" call
    assert call(rows.t(), 2.0)[0] == floor
    assert call(torch.ones(8).expand(8, 8), 2.0)[0] == floor  # row stride 0: rows overlap
    assert call(torch.ones(8, 16).view(2, 4, 16)[..., :8], 2.0)[0] == fast  # leading dims: one row stride
    assert call(torch.ones(2, 5, 16)[:, :4, :8], 2.0)[0] == floor  # leading dims not one stride
    assert call(torch.ones(8, 1, 16)[..., :8], 2.0)[0] == fast  # a size-1 dim's stride does not count
    assert call(rows, rows)[0] == fast
    assert call(rows, rows.t())[0] == floor  # one tensor without a row stride decides
    assert call(rows, 2.0, out=torch.empty(8, 32)[:, 8:16])[0] == fast
    assert call(rows, 2.0, out=rows.t())[0] == floor
    assert call(torch.ones(8, 8), 2.0)[0] == fast


def test_a_row_that_takes_any_view_takes_a_row_strided_one(op, call_impl):
    op(f"jit/{op.name}", "jit", layouts=("contiguous", "strided"))
    call = dispatch.get_op(op.name)
    assert call(torch.ones(8, 16)[:, :8], 2.0)[0] == f"jit/{op.name}"
    assert spec.get_row(f"jit/{op.name}").takes("rows")
    assert not spec.get_row(f"native/{op.name}").takes("bogus")


def test_explain_says_which_layout_a_call_has_and_what_each_row_takes(op):
    op(f"triton/{op.name}", "triton", layouts=("contiguous", "rows"))
    op(f"jit/{op.name}", "jit")  # contiguous only, the default
    rows = torch.ones(8, 16)[:, :8]
    e = explain(op.name, rows)
    assert e.context.layout == "rows" and e.chosen.name == f"triton/{op.name}"
    assert str(e).splitlines()[0].endswith(", row-strided")
    assert e.verdict(f"jit/{op.name}").reason == "takes contiguous tensors only; this call has a row-strided view"
    e = explain(op.name, rows.t())
    assert e.context.layout == "strided" and e.chosen.name == f"native/{op.name}"
    assert e.verdict(f"triton/{op.name}").reason == (
        "takes contiguous tensors or row-strided views (contiguous last dim, one row stride) only; this call has "
        "a strided view (its last dim or leading dims are not one row stride)")
    assert explain(op.name, rows, layout="contiguous").chosen.name == f"jit/{op.name}"
    with pytest.raises(RegistryError, match=r"layout must be one of contiguous, rows, strided"):
        explain(op.name, rows, layout="diagonal")


def test_layouts_are_validated_and_default_to_contiguous(op):
    with pytest.raises(RegistryError, match=r"layouts must be among contiguous, rows, strided"):
        KernelSpec(name=f"jit/{op.name}_bad", op=op.name, backend="jit", target=_impl("x"), layouts=("rowwise",))
    assert KernelSpec(name=f"jit/{op.name}_d", op=op.name, backend="jit", target=_impl("x")).layouts == ("contiguous",)
    assert spec.get_row(f"native/{op.name}").layouts == spec.LAYOUTS


@pytest.mark.parametrize("make, want", [
    (lambda: torch.ones(4, 8), 8),
    (lambda: torch.ones(4, 16)[:, :8], 16),
    (lambda: torch.ones(1, 16)[:, :8], 8),  # one row: contiguous, as torch says
    (lambda: torch.ones(2, 3, 16)[..., :8], 16),
    (lambda: torch.ones(4, 1, 16)[..., :8], 16),
    (lambda: torch.ones(0, 16)[:, :8], 8),  # empty: contiguous
    (lambda: torch.ones(8, 4).t(), None),
    (lambda: torch.ones(4, 16)[:, ::2], None),
    (lambda: torch.ones(16)[::2], None),
    (lambda: torch.ones(8).expand(4, 8), None),
    (lambda: torch.ones(2, 5, 16)[:, :4, :8], None),
    (lambda: torch.ones(4, 16).as_strided((4, 8), (4, 1)), None),  # rows overlap
], ids=["contiguous", "rows", "one-row", "3d-rows", "size1-dim", "empty", "transposed", "step", "1d-step",
        "expand", "non-uniform", "overlap"])
def test_row_stride_classifies_views(make, want):
    t = make()
    assert spec.row_stride(t) == want
    want_layout = "contiguous" if t.is_contiguous() else "rows" if want is not None else "strided"
    assert spec.layout_of([t, torch.ones(3)]) == want_layout


def test_a_non_tensor_argument_is_a_type_error_naming_the_op(op, call_impl):
    call = dispatch.get_op(op.name)
    with pytest.raises(TypeError, match=rf"^{op.name}\(\): argument 1 must be a torch.Tensor, got str$"):
        call("abc", 2.0)
    with pytest.raises(TypeError, match=rf"^{op.name}\(\): .*argument 1"):
        call()


def test_the_declared_dispatch_argument_picks_the_row(call_impl):
    """rope-like signature: an int64 first argument, the float tensor second decides dtype and size."""
    from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference, declare_op

    name = f"t_arg{next(_ids)}"
    with spec.isolated():
        declare_op(name, dispatch_arg=1, native=lambda pos, q: ("native", q.dtype),
                   reference=Reference(make_inputs=lambda *a: (), oracle=lambda *a: None),
                   bench=lambda n, d, dev: CaseArgs(()))
        spec.register(KernelSpec(name=f"triton/{name}", op=name, backend="triton", target=lambda pos, q: "triton",
                                 devices=("cpu",), dtypes=("bf16",), golden=VERIFIED))
        call = dispatch.get_op(name)
        pos = torch.arange(4)
        assert call.dispatch_arg == 1
        assert call(pos, torch.ones(4, dtype=torch.bfloat16)) == "triton"
        assert call(pos, torch.ones(4)) == ("native", torch.float32)
        assert dispatch.resolve(name, pos, torch.ones(4, dtype=torch.bfloat16)).name == f"triton/{name}"
        with pytest.raises(TypeError, match=rf"{name}\(\): .*argument 2"):
            call(pos)


def test_registration_invalidates_the_cache(op, call_impl):
    call = dispatch.get_op(op.name)
    assert call(X)[0] == f"native/{op.name}"
    op(f"triton/{op.name}", "triton")
    assert call(X)[0] == f"triton/{op.name}"


def test_reverification_invalidates_the_cache(op, call_impl):
    op(f"jit/{op.name}", "jit", golden=GoldenRecord(verified=False))
    call = dispatch.get_op(op.name)
    assert call(X)[0] == f"native/{op.name}"
    spec.update_golden(f"jit/{op.name}", VERIFIED)
    assert call(X)[0] == f"jit/{op.name}"


def test_new_measurements_invalidate_the_cache(op, call_impl):
    op(f"triton/{op.name}", "triton")
    call = dispatch.get_op(op.name)
    assert call(X)[0] == f"triton/{op.name}"
    measurements.record(op.name, f"native/{op.name}", "cpu", "fp32", 8, 1.0)
    assert call(X)[0] == f"native/{op.name}"


def test_op_without_native_row_cannot_dispatch():
    row = KernelSpec(name="triton/t_orphan", op="t_orphan", backend="triton", target=_impl("x"),
                     devices=("cpu",), golden=VERIFIED)
    spec.register(row)
    try:
        with pytest.raises(RegistryError, match="op 't_orphan' has no native row"):
            dispatch.resolve("t_orphan", X)
    finally:
        spec.unregister(row.name)


def test_unknown_op_raises():
    with pytest.raises(RegistryError, match="unknown op 'no_such_op'"):
        dispatch.resolve("no_such_op", X)


def test_explain_needs_a_dtype(op):
    with pytest.raises(RegistryError, match="give an example tensor or dtype="):
        dispatch.explain(op.name)


def test_explain_text_and_html(op):
    op(f"jit/{op.name}", "jit", available=lambda device=None: Availability(False, "nvcc not found"))
    op(f"triton/{op.name}", "triton")
    e = dispatch.explain(op.name, dtype="bf16", device="cpu", numel=4097)
    text = str(e)
    assert "bf16 on cpu, numel in [2^12, 2^13)" in text
    lines = text.splitlines()
    assert lines[1].split()[:3] == ["row", "backend", "verdict"]
    assert any(line.startswith(f"jit/{op.name}") and "filtered" in line and "nvcc not found" in line for line in lines)
    from rapid_llm.notebook.tables import explanation_html

    html = explanation_html(e)
    assert "<table>" in html and "nvcc not found" in html and "#d4f4dd" in html


def test_scale_on_cpu_explains_every_row():
    e = dispatch.explain("scale", torch.ones(8))
    jit = e.verdict("jit/scale")
    assert jit.verdict == "filtered"
    if not torch.cuda.is_available():
        assert "CPU-only build" in jit.reason or "no CUDA device" in jit.reason or "nvcc" in jit.reason
        # under the interpreter (this test session) Triton outranks the floor on CPU
        assert e.chosen.name == "triton/scale"
        assert e.verdict("native/scale").verdict == "outranked"


def test_scale_on_plain_cpu_chooses_native():
    """Without TRITON_INTERPRET a CPU tensor has only the floor; every other row says why."""
    import subprocess
    import sys

    code = ("import os; os.environ.pop('TRITON_INTERPRET', None)\n"
            "import torch; from rapid_llm.kernels import explain\n"
            "e = explain('scale', torch.ones(8)); print(e)\n"
            "print('CHOSEN', e.chosen.name)\n"
            "print('TRITON', e.verdict('triton/scale').reason)\n"
            "print('JIT', e.verdict('jit/scale').reason)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "CHOSEN native/scale" in out
    assert "TRITON CPU tensors need TRITON_INTERPRET=1" in out
    if not torch.cuda.is_available():
        assert "CPU-only build" in out or "no CUDA device" in out


def test_scale_dispatches_through_the_package():
    import rapid_llm.kernels as K

    out = K.scale(torch.arange(4.0), 2.0)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_no_row_at_all_for_a_dtype_raises_with_every_reason(op):
    """When even the native row does not cover the dtype, say so instead of failing obscurely."""
    spec.register(KernelSpec(name=f"native/{op.name}", op=op.name, backend="native", target=_impl("n"),
                             devices=("cpu",), dtypes=("fp32",)), replace=True)
    with pytest.raises(RegistryError, match=rf"op '{op.name}' has no row for bf16 on cpu: native/{op.name}: bf16 not in dtypes"):
        dispatch.resolve(op.name, torch.ones(2, dtype=torch.bfloat16))


def test_explain_for_cuda_on_a_machine_without_cuda(op):
    """explain(device='cuda') answers on a CPU-only machine instead of touching the CUDA runtime."""
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only path")
    e = dispatch.explain(op.name, dtype="fp32", device="cuda")
    assert e.chosen.name == f"native/{op.name}"


def test_get_row_finds_shipped_rows_in_a_fresh_process():
    import subprocess
    import sys

    code = "import rapid_llm.kernels as K; print(K.get_row('native/scale').backend, len(K.rows_for('scale')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["native", "3"]


def test_the_interpreter_serves_calls_only_when_asked(monkeypatch):
    """With TRITON_INTERPRET=1 a Triton row can be verified on CPU, but dispatch keeps the floor unless asked."""
    from rapid_llm.kernels.toolchain import triton_support

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton_support.serve_interpreter(None)
    monkeypatch.delenv("RAPID_LLM_SERVE_INTERPRETER", raising=False)
    e = explain("scale", torch.randn(4096))
    assert e.chosen.name == "native/scale"
    assert e.verdict("triton/scale").reason == triton_support.INTERPRETER_REASON
    monkeypatch.setenv("RAPID_LLM_SERVE_INTERPRETER", "1")
    triton_support.serve_interpreter(None)
    assert explain("scale", torch.randn(4096)).verdict("triton/scale").verdict != "filtered"


#: Strided views of a [64, 33] tensor: transposed, stepped, and one row stride over a contiguous last dim.
STRIDED_VIEWS = [lambda x: x.t(), lambda x: x.reshape(-1)[::2], lambda x: x[:, 1:]]


@pytest.mark.parametrize("device", ["cpu"])  # and "cuda" in tests/gpu/unit/dispatch/test_dispatch.py
@pytest.mark.parametrize("view", STRIDED_VIEWS)
def test_strided_inputs_reach_a_row_that_takes_them(view, device):
    """Any input the native row takes works through the op; rows that need contiguous tensors step aside."""
    import rapid_llm.kernels as K
    from tests.reference import assert_close_to_ref, scale_ref

    x = view(torch.randn(64, 33, device=device))
    assert_close_to_ref(K.scale(x, 1.7), scale_ref(x, 1.7), "strided scale")
    e = explain("scale", x)
    # x[:, 1:] is one row stride over a contiguous last dim ("rows"); scale's fast rows take neither.
    assert e.context.layout in ("rows", "strided") and e.chosen.name == "native/scale"
    for row in ("triton/scale", "jit/scale"):
        assert e.verdict(row).verdict == "filtered"
    out = torch.empty(64, 66, device=device)[:, ::2]
    y = torch.randn(64, 33, device=device)
    K.scale(y, 2.0, out=out)
    assert_close_to_ref(out, scale_ref(y, 2.0), "into a strided out")


def test_errors_at_the_top_level_are_one_clear_line():
    import rapid_llm.kernels as K

    with pytest.raises(TypeError, match=r"^scale: input must be a tensor, got str$"):
        K.scale("abc", 2)  # the op's own checks, as its floor called directly says
    with pytest.raises(RegistryError, match=r"^unknown op 'nonexistent_op'; known ops: .*scale") as info:
        K.explain("nonexistent_op")
    assert info.value.__cause__ is None and info.value.__context__ is None
    with pytest.raises(ValueError, match=r"^scale: input must be bf16, fp16, fp32, fp64, got int32$") as info:
        K.scale(torch.ones(3, dtype=torch.int32), 2.0)
    assert info.value.__context__ is None  # no internal KeyError chained under it


def test_the_floor_may_serve_a_call_with_a_cheaper_callable_that_computes_the_same(call_impl):
    """scale's floor offers torch.mul itself where it computes exactly what the floor does (no out=, not a
    half type on CPU); with out= the floor's own checks stay in the path."""
    from rapid_llm.kernels.toolchain import triton_support

    triton_support.serve_interpreter(False)  # the floor answers CPU calls here, not Triton's interpreter
    call = dispatch.get_op("scale")
    x = torch.randn(64)
    assert call._entry(x, True, False, False)[0] is torch.mul
    assert call._entry(x, True, False, True)[0] is not torch.mul
    assert call._entry(x.half(), True, False, False)[0] is not torch.mul  # CPU half: through fp32 explicitly
    assert torch.equal(call(x, 1.7), torch.mul(x, 1.7))
    out = torch.empty(64)
    assert call(x, 1.7, out=out) is out and torch.equal(out, torch.mul(x, 1.7))
    assert call.cached_entries() == 2  # one resolution without out=, one with
    with pytest.raises(ValueError, match=r"scale: shapes/dtypes differ: \["):
        call(x, 1.7, out=torch.empty(3))
