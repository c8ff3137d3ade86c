"""compile_for's refusals. The compile itself (a Gluon kernel for sm_90, its registers, layout and 16-byte accesses)
is tests/ops/test_rms_norm.py's, in a process without Triton's interpreter, which this process runs."""
from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from rapid_llm.kernels.inspection.offline import compile_for  # noqa: E402


@triton.jit
def _double(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)


def test_every_argument_needs_a_type_or_a_value_and_nothing_else_is_taken():
    with pytest.raises(ValueError, match=r"^compile_for\(_double\): no type or value for n; not an argument: m$"):
        compile_for(_double, {"x_ptr": "*fp32", "m": "i32"}, {"BLOCK": 64})


def test_under_the_interpreter_it_says_why_it_cannot_compile(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match=r"interpreter is on \(TRITON_INTERPRET=1\).*unset TRITON_INTERPRET"):
        compile_for(_double, {"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 64})
