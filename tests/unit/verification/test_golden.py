"""Golden verification: shipped rows pass, wrong rows fail, and the verdict reaches dispatch."""
from __future__ import annotations

import math
import re

import pytest
import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.dispatch.dispatcher import explain
from rapid_llm.kernels.verification.golden import GoldenError, verify
from rapid_llm.kernels.registry.opdecl import Reference, declare_op
from rapid_llm.notebook.tables import golden_html
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain.triton_support import interpreting

HAS_CUDA = torch.cuda.is_available()
SMALL = (1, 4097)


def _add_row(name: str, fn) -> str:
    spec.register(KernelSpec(name=name, op="scale", backend="external", target=fn, dtypes=("bf16", "fp16", "fp32"),
                             devices=("cpu", "cuda"), golden=GoldenRecord(baseline="native/scale")))
    return name


def writes_zeros(x, factor, out=None):
    out = torch.empty_like(x) if out is None else out
    return out.zero_()


def leaves_out_untouched(x, factor, out=None):
    return torch.empty_like(x)


def computes_in_half(x, factor, out=None):
    out = torch.empty_like(x) if out is None else out
    return out.copy_((x.half() * factor).to(x.dtype))


def skips_the_tail(x, factor, out=None):
    out = torch.empty_like(x) if out is None else out
    n = x.numel() // 4096 * 4096
    out.view(-1)[:n] = x.reshape(-1)[:n].float().mul(factor).to(x.dtype)
    return out


def correct(x, factor, out=None):
    out = torch.empty_like(x) if out is None else out
    return out.copy_(x.float() * factor)


@pytest.mark.parametrize("wrong", [writes_zeros, leaves_out_untouched, skips_the_tail])
def test_wrong_rows_fail_every_dtype(wrong):
    name = _add_row(f"external/{wrong.__name__}", wrong)
    report = verify(name, sizes=SMALL)
    assert not report.passed
    assert all(not r.passed and r.n_bad > 0 for r in report.results)
    assert spec.get_row(name).golden.verified is False
    reason = explain("scale", dtype="fp32", device="cpu", numel=4097).verdict(name).reason
    assert reason.startswith("golden unverified: its last verify failed against native/scale (max |diff| ")


def test_a_row_never_verified_is_told_apart_from_one_that_failed():
    name = _add_row("external/not_yet", correct)
    reason = explain("scale", dtype="fp32", device="cpu", numel=4097).verdict(name).reason
    assert reason == "golden unverified (verify it to make it eligible)"


def test_untouched_out_is_reported_as_never_written():
    name = _add_row("external/untouched", leaves_out_untouched)
    worst = verify(name, sizes=SMALL, dtypes=("fp32",))["fp32"].worst_element
    assert math.isnan(worst.row_value) and math.isinf(worst.abs_diff)


def test_tail_bug_shows_at_the_tail():
    name = _add_row("external/tail", skips_the_tail)
    result = verify(name, sizes=(4097,), dtypes=("fp16",))["fp16"]
    tail = [e for e in result.worst if e.case == "numel=4097"]
    assert tail and all(e.index == (4096,) for e in tail)


def test_low_precision_math_fails_where_it_shows():
    name = _add_row("external/half_math", computes_in_half)
    report = verify(name, sizes=SMALL)
    assert report["fp16"].passed  # computing fp16 data in fp16 is fine
    assert not report["fp32"].passed  # fp32 data through fp16 loses 13 bits
    assert report["fp32"].max_rel_diff > 1e-4
    assert not report.passed and not spec.get_row(name).golden.verified


def test_verification_makes_a_row_eligible():
    name = _add_row("external/good", correct)
    assert explain("scale", dtype="bf16", device="cpu", numel=4097).verdict(name).verdict == "filtered"
    report = verify(name, sizes=SMALL)
    assert report.passed, str(report)
    record = spec.get_row(name).golden
    assert record.verified and record.baseline == "native/scale"
    assert dict(record.per_dtype).keys() == {"bf16", "fp16", "fp32"}
    assert record.max_abs_diff == max(d for _, d in record.per_dtype)
    assert explain("scale", dtype="bf16", device="cpu", numel=4097).verdict(name).verdict == "chosen"


def test_absolute_tolerance_overrides_the_rule():
    strict = verify("native/scale", tolerance={"fp32": 0.0}, dtypes=("fp32",), sizes=SMALL, record=False)
    assert not strict.passed and "<= 0" in strict["fp32"].rule
    loose = verify("native/scale", tolerance=1.0, dtypes=("fp32",), sizes=SMALL, record=False)
    assert loose.passed


def test_record_false_leaves_the_registry_alone():
    name = _add_row("external/zeros", writes_zeros)
    before = spec.get_row(name).golden
    verify(name, sizes=(1,), dtypes=("fp32",), record=False)
    assert spec.get_row(name).golden == before


def test_report_renders_as_text_and_html():
    report = verify("native/scale", sizes=(1,), dtypes=("fp32", "bf16"), record=False)
    text, page = str(report), golden_html(report)
    assert "native/scale" in text and "PASS" in text and "bf16" in text
    assert "<table>" in page and "fp32" in page


def writes_one_past_the_end(x, factor, out=None):
    out = correct(x, factor, out)
    out.as_strided((out.numel() + 1,), (1,), out.storage_offset())[-1] = 0
    return out


def test_a_failing_row_says_why_in_the_row():
    """A defect fails a dtype with 0 bad elements: the row itself names it, not only the lines below."""
    report = verify(_add_row("external/past_the_end", writes_one_past_the_end), sizes=SMALL, dtypes=("fp32",),
                    record=False)
    fp32 = report["fp32"]
    assert not fp32.passed and fp32.n_bad == 0 and fp32.verdict == "FAIL: guard_band"
    assert "fp32   FAIL: guard_band  " in str(report) and "<td style='text-align:left'>FAIL: guard_band</td>" \
        in golden_html(report)
    zeros = verify(_add_row("external/zeros_why", writes_zeros), sizes=(4097,), dtypes=("fp32",), record=False)
    assert zeros["fp32"].verdict.startswith(f"FAIL: {zeros['fp32'].n_bad} bad elements")
    assert verify("native/scale", sizes=(1,), dtypes=("fp32",), record=False)["fp32"].verdict == "pass"


def test_a_report_failed_by_the_sanitizer_alone_says_so_in_its_header():
    import dataclasses

    report = verify("native/scale", sizes=(1,), dtypes=("fp32",), record=False)
    flagged = dataclasses.replace(report, findings=("memcheck: invalid write",))
    assert re.match(r"golden native/scale vs native/scale and the float64 oracle on (cpu|cuda): "
                    r"FAIL: 1 sanitizer finding\n", str(flagged))


def _gelu_u(x):
    return math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)


def gelu_tanh(x):
    """The textbook form, in x's dtype: for negative x, 1 + tanh(u) cancels."""
    return 0.5 * x * (1 + torch.tanh(_gelu_u(x)))


def gelu_tanh_magnitude(x):
    return (0.5 * x).abs() + (0.5 * x * torch.tanh(_gelu_u(x))).abs()


def test_magnitude_judges_a_cancelling_op_fairly():
    """docs/adding-an-op.md's GELU-tanh: a correct fp32 row fails against |exact|, passes against the magnitude."""
    from rapid_llm.kernels.registry.opdecl import CaseArgs

    def inputs(shape, dtype, device, generator):
        return ((torch.rand(shape, generator=generator, dtype=torch.float64) * 10 - 8).to(device=device, dtype=dtype),)

    def declare(magnitude):
        declare_op("gelu_t", reference=Reference(make_inputs=inputs, oracle=gelu_tanh, magnitude=magnitude),
                   bench=lambda n, d, dev: CaseArgs(()), native=lambda x: gelu_tanh(x.double()).to(x.dtype),
                   dtypes=("fp32",), devices=("cpu",), replace=True)
        spec.register(KernelSpec(name="external/gelu_t", op="gelu_t", backend="external", target=gelu_tanh,
                                 dtypes=("fp32",), devices=("cpu",), golden=GoldenRecord(baseline="native/gelu_t")),
                      replace=True)

    declare(None)
    strict = verify("external/gelu_t", sizes=(4097,), record=False)["fp32"]
    assert not strict.passed and strict.worst_element.exact_value < 0 and strict.max_rel_diff > 0.1
    declare(gelu_tanh_magnitude)
    fair = verify("external/gelu_t", sizes=(4097,), record=False)["fp32"]
    assert fair.passed and fair.max_rel_diff < 1e-6


def test_bad_requests_name_the_problem():
    with pytest.raises(GoldenError, match="dtype 'int8'"):
        verify("native/scale", dtypes=("int8",))
    with pytest.raises(GoldenError, match="sizes"):
        verify("native/scale", sizes=(0,))
    with pytest.raises(spec.RegistryError, match="no row named"):
        verify("triton/nope")
    with pytest.raises(spec.RegistryError, match="oracle must be callable"):
        Reference(make_inputs=lambda *a: a, oracle="not callable")


def test_op_without_reference_is_a_clear_error():
    spec.register(KernelSpec(name="native/unref", op="unref", backend="native", target=correct, devices=("cpu",)))
    with pytest.raises(GoldenError, match="op 'unref' has no golden reference: op 'unref' is not declared"):
        verify("native/unref")


@pytest.mark.skipif(HAS_CUDA, reason="checks the CPU-only refusal")
def test_jit_row_without_cuda_is_refused_and_left_alone():
    before = spec.get_row("jit/scale").golden
    with pytest.raises(GoldenError, match="cannot verify jit/scale"):
        verify("jit/scale")
    assert spec.get_row("jit/scale").golden == before




def test_an_empty_edge_case_is_judged_by_its_shape_alone():
    """A case with no elements (no tokens) has nothing for the per-element rule to reduce: verify passes it when
    its shape is right, and names a wrong shape."""
    from rapid_llm.kernels.registry.opdecl import CaseArgs

    def inputs(shape, dtype, device, generator):
        return (torch.randn(shape, generator=generator, dtype=torch.float64).to(device=device, dtype=dtype),)

    def empty(dtype, device, generator):
        return [("no tokens", (torch.empty(0, 8, dtype=dtype, device=device),))]

    declare_op("twice_t", reference=Reference(make_inputs=inputs, oracle=lambda x: 2 * x, edge_cases=empty),
               bench=lambda n, d, dev: CaseArgs(()), native=lambda x: 2 * x, dtypes=("fp32",), devices=("cpu",),
               replace=True)
    assert verify("native/twice_t", sizes=(33,), record=False).passed
    spec.register(KernelSpec(name="external/twice_flat_t", op="twice_t", backend="external",
                             target=lambda x: (2 * x).reshape(-1), dtypes=("fp32",), devices=("cpu",),
                             golden=GoldenRecord(baseline="native/twice_t")), replace=True)
    with pytest.raises(GoldenError, match=r"no tokens: row returned shape \(0,\), expected \(0, 8\)"):
        verify("external/twice_flat_t", sizes=(33,), record=False)
