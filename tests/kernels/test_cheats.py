"""Each cheat kernel of tests/kernels/cheats/ is caught with its named verdict, on CPU; the fixed rows raise none."""
from __future__ import annotations

import pytest

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification.defects import DEFECT_KINDS
from rapid_llm.kernels.verification.golden import verify

CHEATS = [("scale_in_bf16", "precision_loss"), ("scale_on_a_host_thread", "deferred_work")]


def cheat_row(fn: str) -> str:
    name = f"external/{fn}"
    spec.register(KernelSpec(name=name, op="scale", backend="external", target=f"tests.kernels.cheats.cheat_rows:{fn}",
                             dtypes=("fp32",), devices=("cpu",)))
    return name


@pytest.mark.parametrize("fn, kind", CHEATS, ids=[c[0] for c in CHEATS])
def test_cheat_is_caught_by_name(fn, kind):
    assert kind in DEFECT_KINDS
    report = verify(cheat_row(fn), dtypes=["fp32"], device="cpu")
    assert not report.passed, str(report)
    kinds = {d.kind for d in report.defects}
    assert kind in kinds, f"expected {kind!r}, got {sorted(kinds)}\n{report}"
    assert "unwritten" not in kinds or kind != "deferred_work", str(report)  # the cause is named, not its symptom


@pytest.mark.parametrize("seed_offset", [1, 2])
def test_no_cheat_verdict_on_the_shipped_rows(seed_offset, monkeypatch):
    """0 false verdicts: every shipped row that runs here passes verify with no defect, over three seeds (the
    first is test_rows.py's run of every row; these are the other two)."""
    import zlib

    crc32 = zlib.crc32  # verify seeds its cases from crc32 of the op and dtype: shift them for another seed
    monkeypatch.setattr(zlib, "crc32", lambda data: crc32(data) + 1000 * seed_offset)
    for op in spec.all_ops():
        for row in spec.rows_for(op):
            if "cpu" not in row.devices or not row.probe("cpu"):
                continue
            report = verify(row.name, device="cpu", record=False, sizes=(1, 4097))
            assert report.passed and report.defects == (), str(report)
