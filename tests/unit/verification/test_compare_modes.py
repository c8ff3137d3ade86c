"""The comparison modes verify uses for quantised outputs and special values, and the defects they catch.

The grid helpers are checked against torch's own fp8 and fp32 encodings; then defect rows of
scaled_fp8_quant and merge_attn_states (tests/unit/verification/defects/quant_merge_defects.py, plain torch on CPU)
must fail verify in the new modes, each for its own reason, while each fixed twin passes. A row that is never
more than one fp8 ulp off passes, and the report's count of one-ulp values is what shows it.
"""
from __future__ import annotations

import math

import pytest
import torch

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification.compare_modes import (FP8_E4M3_MAX, Part, QuantisedOutput, SpecialValues,
                                                          e4m3_ulps, fp32_ulps, round_to_e4m3)
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.verification.report import GoldenReport

MODULE = "tests.unit.verification.defects.quant_merge_defects"


def external_row(op: str, fn: str) -> str:
    name = f"external/{fn}"
    spec.register(KernelSpec(name=name, op=op, backend="external", target=f"{MODULE}:{fn}",
                             dtypes=("bf16", "fp16", "fp32"), devices=("cpu",)))
    return name


# ------------------------------------------------------------------ the grids


def test_round_to_e4m3_is_one_rounding_to_nearest_even():
    gen = torch.Generator().manual_seed(0)
    v = (torch.randn(200_000, generator=gen, dtype=torch.float64) * 60).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    via_fp32 = v.to(torch.float32).to(torch.float8_e4m3fn).to(torch.float64)  # fp32 holds these draws closely
    assert torch.equal(round_to_e4m3(v), via_fp32)
    ties = torch.tensor([1.0625, 17.0, 7.75, 15.5, 2.0 ** -10, 3 * 2.0 ** -10, -0.0, 448.0, math.nan],
                        dtype=torch.float64)
    want = torch.tensor([1.0, 16.0, 8.0, 16.0, 0.0, 2.0 ** -8, -0.0, 448.0, math.nan], dtype=torch.float64)
    assert torch.equal(round_to_e4m3(ties).nan_to_num(), want.nan_to_num())
    # a float64 value just above a tie rounds up; through fp32 it would land on the tie and round to even
    above = torch.tensor([17.0 + 2.0 ** -30], dtype=torch.float64)
    assert round_to_e4m3(above).item() == 18.0
    assert above.to(torch.float32).to(torch.float8_e4m3fn).item() == 16.0


def test_ulp_distances():
    got = torch.tensor([16.0, 15.0, 14.0, -0.0, math.nan, math.nan, 448.0], dtype=torch.float64)
    exact = torch.tensor([16.0, 16.0, 16.0, 0.0, math.nan, 1.0, 416.0], dtype=torch.float64)
    assert e4m3_ulps(got, exact).tolist() == [0.0, 1.0, 2.0, 0.0, 0.0, math.inf, 1.0]
    one = torch.tensor([1.0], dtype=torch.float32)
    up = torch.nextafter(one, torch.tensor([2.0]))
    assert fp32_ulps(torch.cat([one, up, -one]).double(), torch.cat([one, one, one]).double()).tolist()[:2] == [0, 1]
    assert fp32_ulps(torch.tensor([math.inf]).double(), torch.tensor([math.inf]).double()).item() == 0


def test_quantised_rule_judges_steps_and_counts_them():
    mode = QuantisedOutput(parts=lambda n, s: (n, s))
    exact = torch.tensor([16.0, 16.0, 16.0, 0.5], dtype=torch.float64)  # three values, one scale
    got = torch.tensor([16.0, 18.0, 20.0, 0.5], dtype=torch.float64)
    counts: dict[str, int] = {}
    errs = mode.errors(got, exact, (3, 1), counts)
    assert (errs.diff > errs.allowed).tolist() == [False, False, True, False]
    assert counts["values 1 ulp off"] == 1 and counts["values further off"] == 1
    scale_off = torch.tensor([16.0, 16.0, 16.0, 0.5 + 2.0 ** -25], dtype=torch.float64)
    errs = mode.errors(scale_off, exact, (3, 1), counts)
    assert bool(errs.diff[3] > errs.allowed[3]), "a scale one fp32 ulp off fails when scales must be exact"
    assert "1 of 1 exact" not in mode.summary(counts)[0]


def test_special_values_rule_is_exact_where_the_contract_is():
    mode = SpecialValues(parts=lambda *a: [Part("x", 4, torch.float32)],
                         magnitude=lambda *a: torch.ones(4, dtype=torch.float64),
                         exact_where=lambda *a: {"kept": torch.tensor([False, False, True, False])})
    exact = torch.tensor([1.0, -math.inf, 2.0, math.nan], dtype=torch.float64)
    got = torch.tensor([1.0 + 1e-7, -math.inf, 2.0 + 1e-7, math.nan], dtype=torch.float64)
    counts: dict[str, int] = {}
    errs = mode.errors(got, exact, (), counts)
    assert (errs.diff > errs.allowed).tolist() == [False, False, True, False]
    assert counts["kept"] == 1 and counts["kept missed"] == 1 and counts["non-finite expected"] == 2
    errs = mode.errors(torch.tensor([1.0, math.inf, 2.0, 0.0], dtype=torch.float64), exact, (), counts)
    assert (errs.diff > errs.allowed).tolist() == [False, True, False, True]


# ------------------------------------------------------------------ defect rows through verify


def _notes(report: GoldenReport) -> str:
    return "\n".join(report.defect_lines())


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_quantiser_that_rounds_the_scale_fails_on_scales(dtype):
    report = verify(external_row("scaled_fp8_quant", "scaled_fp8_quant_rounds_scale"), dtypes=[dtype], device="cpu")
    assert not report.passed, str(report)
    assert report[dtype].n_bad > 0 and report[dtype].defects == (), str(report)
    line = next(n for n in report[dtype].notes if n.startswith("fp8 values"))
    exact, total = (int(v) for v in line.rsplit("scales: ", 1)[1].split(" exact")[0].split(" of "))
    assert exact < total, line  # the scales are what is wrong


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_quantiser_that_clamps_wrong_fails_on_values(dtype):
    report = verify(external_row("scaled_fp8_quant", "scaled_fp8_quant_clamps_wrong"), dtypes=[dtype], device="cpu")
    assert not report.passed, str(report)
    assert abs(report[dtype].worst_element.row_value) == 240.0, str(report)
    assert "0 further" not in report[dtype].notes[0], report[dtype].notes


def test_quantiser_within_one_ulp_passes_and_the_count_shows_it():
    report = verify(external_row("scaled_fp8_quant", "scaled_fp8_quant_truncates"), dtypes=["fp32"], device="cpu")
    assert report.passed, str(report)
    note = report["fp32"].notes[0]
    one_ulp, total = (int(v) for v in note.split(" one ulp")[0].removeprefix("fp8 values: ").split(" of "))
    assert one_ulp > total // 4, note  # rounding toward zero: about half the values one step off


def test_fixed_quantiser_passes():
    report = verify(external_row("scaled_fp8_quant", "scaled_fp8_quant_fixed"), device="cpu")
    assert report.passed and report.defects == (), str(report)
    assert "fp8 values" in _notes(report)


@pytest.mark.parametrize("fn", ["merge_attn_states_nan_for_empty_side", "merge_attn_states_reads_empty_side"])
def test_merge_that_mishandles_an_empty_side_fails_there(fn):
    report = verify(external_row("merge_attn_states", fn), dtypes=["fp32"], device="cpu")
    assert not report.passed, str(report)
    wrong = {line.split(": ")[0].removeprefix("special values, "): int(line.rsplit(", ", 1)[1].split(" wrong")[0])
             for line in report["fp32"].notes}
    assert wrong["one side empty (the other side bit for bit)"] > 0, report["fp32"].notes


def test_merge_nan_for_empty_side_also_breaks_both_empty():
    report = verify(external_row("merge_attn_states", "merge_attn_states_nan_for_empty_side"), dtypes=["bf16"],
                    device="cpu")
    line = next(n for n in report["bf16"].notes if "both sides empty" in n)
    assert not line.endswith(" 0 wrong"), line


def test_fixed_merge_passes():
    report = verify(external_row("merge_attn_states", "merge_attn_states_fixed"), device="cpu")
    assert report.passed and report.defects == (), str(report)
    assert all(line.endswith(" 0 wrong") for r in report.results for line in r.notes), _notes(report)
