"""Fixtures shared by the kernel tests."""
from __future__ import annotations

import pytest

from rapid_llm.kernels.dispatch import dispatcher as dispatch


@pytest.fixture(params=["compiled", "portable"])
def call_impl(request, monkeypatch):
    """Both op call paths: the compiled dispatcher (fastcall) and the portable Python one, same answers."""
    if request.param == "portable":
        monkeypatch.setattr(dispatch, "_FastOp", None)
        monkeypatch.setattr(dispatch, "portable_reason", "chosen by the test")
    elif dispatch._fast_op_type() is None:
        pytest.skip(f"the compiled dispatcher does not build here: {dispatch.portable_reason}")
    monkeypatch.setattr(dispatch, "_ops", {})
    return request.param
