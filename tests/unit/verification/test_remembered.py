"""A remembered verdict holds only under the declaration it was judged against, and only if it is ours."""
from __future__ import annotations

import pytest

from rapid_llm.kernels.registry.opdecl import restore_op
from rapid_llm.kernels.registry.spec import GoldenRecord
from rapid_llm.kernels.verification import remembered
from tests.unit.registry.test_shadow import shadow_scale

DIGEST = "cd" * 32
PASSED = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))


def test_a_verdict_judged_by_the_library_is_recalled_for_the_library_op_only():
    remembered.remember_verification(DIGEST, PASSED, "scale")
    assert remembered.recall_verification(DIGEST, "scale") is not None
    assert remembered.recall_verification(DIGEST, "rms_norm") is None
    shadow_scale()
    try:
        assert remembered.recall_verification(DIGEST, "scale") is None  # judged by another floor now
    finally:
        restore_op("scale")
    assert remembered.recall_verification(DIGEST, "scale") is not None


def test_a_verdict_judged_against_a_shadow_is_not_recalled_once_the_library_op_is_back():
    shadow_scale()
    try:
        remembered.remember_verification(DIGEST, PASSED, "scale")
        assert remembered.recall_verification(DIGEST, "scale") is not None  # the same shadow, a new kernel
    finally:
        restore_op("scale")
    assert remembered.recall_verification(DIGEST, "scale") is None


def test_an_unknown_digest_is_not_recalled():
    assert remembered.recall_verification("0" * 64, "scale") is None


def test_a_refused_build_is_remembered_refused_and_never_recalled_verified():
    remembered.remember_verification(DIGEST, PASSED, "scale")
    remembered.remember_refusal(DIGEST, "scale", "bench (fp32, numel=4097): timed_output_wrong: skipped calls")
    assert remembered.recall_verification(DIGEST, "scale") is None
    assert remembered.recall_refusal(DIGEST, "scale").startswith("bench (fp32, numel=4097): timed_output_wrong")
    assert remembered.recall_refusal(DIGEST, "rms_norm") is None
