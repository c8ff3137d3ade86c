"""A notebook's declaration of a library op: an explicit shadow, undone by restore_op, the process usable throughout.

Each test has a registry of its own (tests/conftest.py), holding the shipped ops; the torch custom ops and
K.<op> objects are the process's, which is the point: after a shadow and its restore they still agree.
"""
from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.dispatch import custom_ops
from rapid_llm.kernels.ops.elementwise.scale import reference as scale_reference
from rapid_llm.kernels.ops.norm.rms_norm import reference as rms_norm_reference
from rapid_llm.kernels.registry import opsource, spec
from rapid_llm.kernels.registry.opdecl import Reference, declare_op, restore_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec, RegistryError

VERIFIED = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale")


def double_scale(input, factor, out=None):
    """A notebook's scale that doubles: input * factor * 2."""
    result = input * (2.0 * factor)
    return result if out is None else out.copy_(result)


def double_oracle(x, factor):
    return x.double() * float(factor) * 2.0


DOUBLE = Reference(make_inputs=scale_reference.make_inputs, oracle=double_oracle, call=scale_reference.call)


def shadow_scale(**kw):
    return declare_op("scale", native=double_scale, reference=DOUBLE, bench=scale_reference.bench_case,
                      dtypes=("fp32",), shadow_library=True, **kw)


def _answers(op: str, *args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K.<op>, the row dispatch picks called directly, and torch.ops.rapid_llm.<op>, on the same arguments."""
    row = K.resolve(op, *args)
    return getattr(K, op)(*args), row.call_path()(*args), getattr(torch.ops.rapid_llm, op)(*args)


def _agree(op: str, *args) -> torch.Tensor:
    via_k, direct, via_torch = _answers(op, *args)
    assert torch.equal(via_k, direct) and torch.equal(via_k, via_torch), (op, via_k, direct, via_torch)
    return via_k


X = torch.arange(6.0)


def test_declaring_a_library_op_needs_the_explicit_choice_and_a_refusal_changes_nothing():
    rows = [r.name for r in spec.rows_for("scale")]
    for extra, why in (({}, "a second declaration would hide them"), ({"replace": True}, "replace=True re-runs")):
        with pytest.raises(RegistryError, match=rf"declare_op\('scale'\): the library declares op 'scale' \(its rows: "
                                                rf"{', '.join(rows)}\), and {why}.*shadow_library=True"):
            declare_op("scale", native=double_scale, reference=DOUBLE, bench=scale_reference.bench_case, **extra)
        assert [r.name for r in spec.rows_for("scale")] == rows and spec.is_library_decl("scale")
        assert torch.equal(_agree("scale", X, 2.0), X * 2)
    with pytest.raises(RegistryError, match="shadow_library=True, but the library declares no op 't_mine'"):
        declare_op("t_mine", native=double_scale, reference=DOUBLE, bench=scale_reference.bench_case,
                   shadow_library=True)
    with pytest.raises(RegistryError, match=r"restore_op\('t_mine'\): the library declares no op 't_mine'"):
        restore_op("t_mine")


def test_redeclare_then_call_then_restore_computes_what_each_declaration_means():
    """The same schema: K.scale, the row called directly and torch.ops.rapid_llm.scale agree at every stage."""
    library_rows = [r.name for r in spec.rows_for("scale")]
    assert torch.equal(_agree("scale", X, 2.0), X * 2)
    shadow_scale()
    assert [r.name for r in spec.rows_for("scale")] == ["native/scale"] and spec.shadowed_rows("scale") == library_rows
    assert torch.equal(_agree("scale", X, 2.0), X * 4)
    status = str(K.explain("scale", X, 2.0)).splitlines()[1]
    assert status == (f"op 'scale': shadowed by a notebook declaration (the library's {len(library_rows)} rows are "
                      f"hidden: {', '.join(library_rows)}; restore_op('scale') brings them back)")
    shadow_scale()  # the cell re-run: the same shadow again
    assert [r.name for r in spec.rows_for("scale")] == ["native/scale"] and torch.equal(_agree("scale", X, 2.0), X * 4)
    assert restore_op("scale") == []
    assert [r.name for r in spec.rows_for("scale")] == library_rows and spec.is_library_decl("scale")
    assert spec.shadowed_rows("scale") is None and K.explain("scale", X, 2.0).status == ""
    assert torch.equal(_agree("scale", X, 2.0), X * 2)
    assert restore_op("scale") == [] and torch.equal(_agree("scale", X, 2.0), X * 2)  # nothing shadowed: no-op


def rms_norm_without_eps(x, weight, out=None):
    """The notebook's rms_norm, eps fixed: another signature than the library's (x, weight, eps, out=None)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
    return y.to(x.dtype) if out is None else out.copy_(y)


def two_inputs(shape, dtype, device, gen):
    x, w, _ = rms_norm_reference.make_inputs(shape, dtype, device, gen)
    return x, w


def two_arg_oracle(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


@pytest.mark.parametrize("make_inputs", [two_inputs, rms_norm_reference.make_inputs],
                         ids=["own inputs: another schema", "the library's inputs: no schema"])
def test_a_shadow_with_its_own_signature_stays_eager_and_the_restore_makes_the_op_whole(make_inputs):
    """The issue's failure: torch.ops.rapid_llm.rms_norm passed the shadow eps as its out= ('float' object has no
    attribute 'copy_'). Now the custom op refuses with the reason until restore_op, and K.rms_norm serves the shadow."""
    x, w = torch.randn(4, 64), torch.rand(64) + 0.5
    library = _agree("rms_norm", x, w, 1e-6)
    declare_op("rms_norm", native=rms_norm_without_eps, bench=rms_norm_reference.bench_case,
               reference=Reference(make_inputs=make_inputs, oracle=two_arg_oracle), shadow_library=True)
    assert torch.equal(K.rms_norm(x, w), rms_norm_without_eps(x, w))
    assert torch.equal(K.rms_norm(x, w), K.resolve("rms_norm", x, w).call_path()(x, w))
    why = "cannot redefine a schema" if make_inputs is two_inputs else "its schema cannot be derived"
    with pytest.raises(RuntimeError, match=rf"{why}.*restore_op\('rms_norm'\) brings the library's declaration back"):
        torch.ops.rapid_llm.rms_norm(x, w, 1e-6)
    assert custom_ops.why_not("rms_norm")
    restore_op("rms_norm")
    assert custom_ops.why_not("rms_norm") == ""
    assert torch.equal(_agree("rms_norm", x, w, 1e-6), library)


def test_rows_of_the_library_op_go_aside_with_it_and_rows_checked_against_the_shadow_come_back_unverified():
    library_rows = [r.name for r in spec.rows_for("scale")]
    spec.register(KernelSpec(name="triton/mine", op="scale", target=double_scale, golden=VERIFIED))  # the library's op
    shadow_scale()
    assert spec.shadowed_rows("scale") == [*library_rows, "triton/mine"]
    with pytest.raises(RegistryError, match="no row named 'triton/mine'"):
        spec.get_row("triton/mine")
    spec.register(KernelSpec(name="triton/under_shadow", op="scale", target=double_scale, golden=VERIFIED))
    assert restore_op("scale") == ["triton/under_shadow"]
    assert [r.name for r in spec.rows_for("scale")] == [*library_rows, "triton/mine", "triton/under_shadow"]
    assert spec.get_row("triton/mine").golden == VERIFIED  # verified against the library's scale: still is
    under = spec.get_row("triton/under_shadow").golden
    assert not under.verified and under.baseline == "native/scale"  # verified against the shadow: not any more


def test_a_shadow_keeps_the_librarys_dispatch_argument():
    from rapid_llm.kernels.ops.rope.rotary_embedding import reference as rope_reference

    rows = [r.name for r in spec.rows_for("rotary_embedding")]
    with pytest.raises(RegistryError, match=r"dispatches on argument 1 \(dispatch_arg=1\).*pass dispatch_arg=1"):
        declare_op("rotary_embedding", native=double_scale, reference=rope_reference.REFERENCE,
                   bench=rope_reference.bench_case, shadow_library=True)
    assert [r.name for r in spec.rows_for("rotary_embedding")] == rows and spec.is_library_decl("rotary_embedding")


def test_a_verify_child_declares_the_shadow_as_the_notebook_did():
    """The module a verify child imports says shadow_library=True for a library op (replace=True would be refused
    there), and replace=True for a notebook's own op."""
    shadow_scale()
    text = opsource.module_source("scale", ship=False, local_imports=True)
    assert "    shadow_library=True," in text and "replace=True" not in text
    with spec.isolated(discover=True):  # a fresh registry, as the child's: the module declares the shadow
        exec(compile(text, "<declaration of scale>", "exec"), {"__name__": "child_declaration"})
        assert spec.shadowed_rows("scale") is not None and torch.equal(K.scale(X, 2.0), X * 4)
    assert torch.equal(K.scale(X, 2.0), X * 4)
    declare_op("t_own", native=double_scale, reference=DOUBLE, bench=scale_reference.bench_case)
    own = opsource.module_source("t_own", ship=False, local_imports=True)
    assert "    replace=True," in own and "shadow_library" not in own


def test_a_shadow_that_cannot_be_declared_leaves_the_library_op_as_it_was():
    rows = [r.name for r in spec.rows_for("scale")]
    spec.register(KernelSpec(name="triton/other_op_row", op="silu_and_mul", target=double_scale))
    clash = KernelSpec(name="triton/other_op_row", target=double_scale)  # a row name another op has
    with pytest.raises(RegistryError, match="belongs to op 'silu_and_mul', cannot move it to 'scale'"):
        declare_op("scale", native=double_scale, reference=DOUBLE, bench=scale_reference.bench_case, rows=[clash],
                   shadow_library=True)
    assert [r.name for r in spec.rows_for("scale")] == rows and spec.is_library_decl("scale")
    assert spec.shadowed_rows("scale") is None and torch.equal(_agree("scale", X, 2.0), X * 2)
