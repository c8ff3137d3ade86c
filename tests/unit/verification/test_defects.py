"""verify catches each kind of defect, on CPU: Triton kernels in the interpreter and plain-torch rows.

Every defect row is a variant of op scale with one known defect (tests/unit/verification/defects/README.md);
verify must fail it and name the defect's kind. Each fixed twin must pass with no defect at all, so a
check that fires on correct code shows up here too. The CUDA kernels are checked on a GPU in
tests/gpu/unit/verification/test_defect_kernels.py, and built here in test_defects_build.py.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.defects import DEFECT_KINDS
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.verification.report import GoldenReport
from rapid_llm.kernels.registry.spec import KernelSpec

pytest.importorskip("triton")
# The special-values case scales the dtype's max by 1.7: inf, as it should be (numpy warns in the interpreter).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")

TRITON_MODULE = "tests.unit.verification.defects.triton_defects"
PYTHON_MODULE = "tests.unit.verification.defects.python_defects"

#: (wrapper, the kind verify must report, whether the values alone would pass a plain comparison)
TRITON_DEFECTS = [
    ("scale_mutates_input", "mutated_input", True),
    ("scale_constant_output", "input_independent", False),
    ("scale_out_of_bounds", "guard_band", True),
    ("scale_writes_nothing", "unwritten", False),
    ("scale_reads_past_end", "out_of_bounds_read", False),
]
PYTHON_DEFECTS = [
    ("scale_ignores_out", "unwritten", False),
    ("scale_skips_tail", "unwritten", False),
    ("scale_computes_in_bf16", "precision_loss", False),
    ("scale_flushes_subnormals", "flush_to_zero", False),
]


def triton_row(fn: str) -> str:
    """Register ``fn`` of triton_defects as a Triton row of scale; its name."""
    name = f"triton/{fn}"
    spec.register(KernelSpec(name=name, op="scale", backend="triton", target=f"{TRITON_MODULE}:{fn}",
                             available="rapid_llm.kernels.toolchain.triton_support:available",
                             dtypes=("bf16", "fp16", "fp32"), devices=("cuda", "cpu")))
    return name


def python_row(fn: str) -> str:
    """Register ``fn`` of python_defects as an external CPU row of scale; its name."""
    name = f"external/{fn}"
    spec.register(KernelSpec(name=name, op="scale", backend="external", target=f"{PYTHON_MODULE}:{fn}",
                             dtypes=("fp32",), devices=("cpu",)))
    return name


def verify_fp32(name: str, device: str = "cpu") -> GoldenReport:
    return verify(name, dtypes=["fp32"], device=device)


#: Triton kernels run compiled on a GPU, and in Triton's interpreter on CPU (tests/conftest.py sets it there only).
TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def kinds(report: GoldenReport) -> set[str]:
    return {d.kind for d in report.defects}


def assert_caught(report: GoldenReport, kind: str, values_pass: bool) -> None:
    assert kind in DEFECT_KINDS
    assert not report.passed, str(report)
    assert kind in kinds(report), f"expected a {kind!r} defect, got {sorted(kinds(report))}\n{report}"
    if values_pass:  # only the defect check can have caught it: a plain comparison of the values passes
        assert report["fp32"].n_bad == 0 and report["fp32"].error is None, str(report)


def assert_clean(report: GoldenReport) -> None:
    assert report.passed, str(report)
    assert report.defects == (), str(report)


@pytest.mark.parametrize(("fn", "kind", "values_pass"), TRITON_DEFECTS, ids=[d[0] for d in TRITON_DEFECTS])
def test_triton_defect_is_caught(fn, kind, values_pass):
    assert_caught(verify_fp32(triton_row(fn), TRITON_DEVICE), kind, values_pass)


def test_triton_fixed_twin_passes():
    report = verify_fp32(triton_row("scale_fixed"), TRITON_DEVICE)
    assert_clean(report)
    assert report["fp32"].deterministic is True


@pytest.mark.parametrize(("fn", "kind", "values_pass"), PYTHON_DEFECTS, ids=[d[0] for d in PYTHON_DEFECTS])
def test_python_defect_is_caught(fn, kind, values_pass):
    assert_caught(verify_fp32(python_row(fn)), kind, values_pass)


def test_python_fixed_twin_passes():
    report = verify_fp32(python_row("scale_fixed"))
    assert_clean(report)
    assert report["fp32"].deterministic is True


def test_nondeterminism_is_reported_not_failed():
    """Two runs that differ by an ulp are a property of the row, not a failure (it does not claim otherwise)."""
    report = verify_fp32(python_row("scale_nondeterministic"))
    assert_clean(report)
    assert report["fp32"].deterministic is False, str(report)
    assert any("deterministic" in line and "no" in line for line in report.defect_lines()), str(report)
