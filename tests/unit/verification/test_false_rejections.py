"""No false rejections: verify passes correct kernels of transcendental ops, and names precision_loss only for one.

On CPU: every floor of the corpus (tests/unit/verification/corpus/) passes in fp32 / fp16 / bf16, its CUDA
sources build, and the rule itself (rapid_llm.kernels.verification.comparison): a bound in ulps of the exact
result calibrated on the floor's error over the whole case, not element by element. The CUDA rows run on
a GPU only (tests/gpu/unit/verification/test_false_rejections.py).
"""
from __future__ import annotations

import shutil

import pytest
import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.opdecl import Reference
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.verification import comparison
from rapid_llm.kernels.verification.golden import verify
from tests.unit.verification.corpus.ops import CORPUS, SOURCES, declare

#: Small on CPU (the floors run in a few milliseconds); a GPU runs verify's full sizes.
CPU_SIZES = (1, 4097)
TANH_MUL = next(c for c in CORPUS if c.name == "tanh_mul")


@pytest.mark.parametrize("c", CORPUS, ids=[c.name for c in CORPUS])
def test_every_floor_passes(c):
    report = verify(declare(c)[0], device="cpu", sizes=CPU_SIZES)
    assert report.passed and report.defects == (), str(report)


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                    reason="the fast path needs g++ and the CUDA toolkit's headers (nvcc)")
@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_cuda_rows_build_and_refuse_cpu_tensors(src):
    module = jit.build_jit(f"corpus_{src.stem}", src, builder="fast").module
    for c in (c for c in CORPUS if c.source == src):
        args = c.law((8,), torch.Generator().manual_seed(0))
        args = tuple(a.float() if isinstance(a, torch.Tensor) else a for a in args)
        for fn in c.launchers:
            with pytest.raises(ValueError, match=rf"^{fn}: CUDA tensors only"):
                getattr(module, fn)(torch.empty_like(args[0]), *args)


def _tanh_mul_row(name: str, result) -> str:
    """A CPU row of the corpus's tanh_mul (the issue's two-input tanh op) that writes ``result(a, b)``."""
    declare(TANH_MUL)

    def row(a, b, out=None):
        return out.copy_(result(a, b))

    spec.register(KernelSpec(name=name, op=TANH_MUL.op, backend="external", target=row, dtypes=("fp32",),
                             devices=("cpu",), golden=GoldenRecord(baseline=f"native/{TANH_MUL.op}")))
    return name


def _floor(a, b):
    return torch.tanh(a) * b


def _ulps_off(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x`` moved ``k`` fp32 ulps away from zero."""
    for _ in range(k):
        x = torch.nextafter(x, torch.where(x < 0, -torch.inf, torch.inf))
    return x


@pytest.mark.parametrize(("k", "passes"), [(3, True), (6, True), (40, False)])
def test_fp32_row_passes_within_the_stated_ulps_and_fails_past_them(k, passes):
    """k fp32 ulps off at every element, where the floor is exact at most: the per-element rule failed 3 ulps."""
    report = verify(_tanh_mul_row(f"external/tanh_mul_{k}_ulps", lambda a, b: _ulps_off(_floor(a, b), k)),
                    sizes=CPU_SIZES, record=False)
    assert report.passed is passes, str(report)
    assert "precision_loss" not in {d.kind for d in report.defects}, str(report)  # k fp32 ulps: no narrower type


@pytest.mark.parametrize("narrow", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_math_in_a_narrower_type_is_named_precision_loss_with_that_type(narrow):
    row = _tanh_mul_row("external/tanh_mul_narrow", lambda a, b: (torch.tanh(a.to(narrow)) * b.to(narrow)).float())
    report = verify(row, sizes=CPU_SIZES, record=False)
    found = [d for d in report.defects if d.kind == "precision_loss"]
    assert not report.passed and found, str(report)
    assert f"in {'bf16' if narrow == torch.bfloat16 else 'fp16'}, not fp32" in found[0].message, str(report)


def _judge(row_ulps: list[float], floor_ulps: list[float]) -> tuple[int, float | None]:
    """Elements of 1.0 (exact) and rows and a floor off by the given fp32 ulps: (bad elements, B)."""
    exact = torch.ones(len(row_ulps), dtype=torch.float64)
    eps = torch.finfo(torch.float32).eps
    got = (exact + torch.tensor(row_ulps, dtype=torch.float64) * eps).float()
    base = (exact + torch.tensor(floor_ulps, dtype=torch.float64) * eps).float()
    ref = Reference(make_inputs=lambda *a: (), oracle=lambda *a: None)
    errors, bound = comparison.case_errors(got, exact, base, torch.float32, ref, None, True)
    return int((errors.diff > errors.allowed).sum()), bound


@pytest.mark.parametrize(("row_ulps", "floor_ulps", "bad", "bound"), [
    ([9, 0, 0], [0, 0, 0], 0, 10.0),    # the stated fp32 bound: 2 + 8 ulps, wherever the floor is exact
    ([11, 0, 0], [0, 0, 0], 1, 10.0),
    ([0, 20, 0], [12, 0, 0], 0, 24.0),  # the floor 12 ulps off at one element sets 2 x 12 for the whole case
    ([0, 30, 0], [12, 0, 0], 1, 24.0),
], ids=["within-stated", "past-stated", "calibrated-elsewhere", "past-calibrated"])
def test_the_bound_is_calibrated_on_the_floor_over_the_whole_case(row_ulps, floor_ulps, bad, bound):
    assert _judge(row_ulps, floor_ulps) == (bad, bound)
