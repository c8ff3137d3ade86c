"""No false rejections on a GPU: every op of the corpus (tests/unit/verification/corpus/), its native floor and
its CUDA rows, passes verify at verify's CUDA sizes (up to 16M elements) in every dtype it declares.

Each test prints the ulps of m each row needed per dtype, of the bound it was held to (the report's "ulps"
column): run with -s to see them.
"""
from __future__ import annotations

import pytest

from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.verification.golden import verify
from tests.unit.verification.corpus.ops import CORPUS, declare

pytestmark = pytest.mark.gpu  # tests/conftest.py skips it, with the reason, where no CUDA device is visible


@pytest.fixture(autouse=True)
def toolchain():
    avail = jit.available()
    if not avail:
        pytest.skip(f"JIT toolchain unavailable: {avail.reason}")


@pytest.mark.parametrize("c", CORPUS, ids=[c.name for c in CORPUS])
def test_floor_and_cuda_rows_pass(c):
    """isolate=False: these kernels are correct and none crashes; containing a crash is test_isolate's business."""
    failed = []
    for row in declare(c):
        report = verify(row, device="cuda", isolate=False)
        print(f"{c.name:14s} {row:26s} " + "  ".join(f"{r.dtype} {r.ulps_text()}" for r in report.results))
        if not report.passed or report.defects:
            failed.append(str(report))
    assert not failed, "\n\n".join(failed)
