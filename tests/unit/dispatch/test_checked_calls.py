"""A JIT row's compiled call path asks its op's check once per kind of call (fastcall_checked.inc).

A call keyed as one the check passed (the same scalars, tensor types, dtypes, devices, shapes, strides, alignment
and overlaps) skips the check; anything else the key cannot tell apart from a bad call is checked, every time.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.ops.norm.rms_norm.native import check as rms_norm_check
from rapid_llm.kernels.ops.rope.rotary_embedding.native import rotary_embedding


@pytest.fixture(scope="module")
def fastcall():
    from rapid_llm.kernels.toolchain.fastpath.binding import fastcall

    try:
        return fastcall()
    except (ImportError, RuntimeError, OSError) as exc:
        pytest.skip(f"the compiled binding does not build here: {exc}")


class Counted:
    """A check that counts the calls it is asked."""

    def __init__(self, check):
        self.check, self.asked = check, 0

    def __call__(self, *args, **kwargs):
        self.asked += 1
        return self.check(*args, **kwargs)


def _rms_norm_row(fastcall, **kw):
    launched = []
    checks = Counted(rms_norm_check)
    row = fastcall.OutFirst(lambda *a: launched.append(a), "rms_norm", 0, checks, None, 3, **kw)
    return row, checks, launched


def test_a_call_like_one_that_passed_is_not_checked_again(fastcall):
    row, checks, launched = _rms_norm_row(fastcall)
    for _ in range(3):
        row(torch.randn(4, 64), torch.randn(64), 1e-6)  # new tensors each time: the addresses are not the key
    assert checks.asked == 1 and len(launched) == 3 and row.remembered() == 1
    row(torch.randn(4, 64), torch.nn.Parameter(torch.randn(64)), 1e-6)  # a model's weight: its own key
    row(torch.randn(4, 64), torch.nn.Parameter(torch.randn(64)), 1e-6)
    assert checks.asked == 2
    row.forget()
    row(torch.randn(4, 64), torch.randn(64), 1e-6)
    assert checks.asked == 3


@pytest.mark.parametrize("other", [
    lambda x, w: (x, w, 1e-5),                           # another eps
    lambda x, w: (x, w, 1),                              # an int eps
    lambda x, w: (x.half(), w.half(), 1e-6),             # another dtype
    lambda x, w: (x[:3], w, 1e-6),                       # another shape
    lambda x, w: (torch.randn(8, 4, 64)[:, 0], w, 1e-6),  # another stride
    lambda x, w: (torch.randn(4 * 64 + 1)[1:].view(4, 64), w, 1e-6),  # another alignment
])
def test_a_call_that_differs_in_what_the_check_reads_is_checked(fastcall, other):
    row, checks, _ = _rms_norm_row(fastcall)
    x, w = torch.randn(4, 64), torch.randn(64)
    row(x, w, 1e-6)
    row(*other(x, w))
    assert checks.asked == 2


@pytest.mark.parametrize("bad, words", [
    (lambda x, w: (x, w, -1e-6), "rms_norm: eps must be >= 0"),
    (lambda x, w: (x, w, float("nan")), "rms_norm: eps must be finite"),
    (lambda x, w: (x, w, 1e-6, x), "rms_norm: out is written and must not share memory with x"),
    (lambda x, w: (x, w, 1e-6, x.as_strided((4, 64), (32, 1))), "rms_norm: out is written and must not share"),
    (lambda x, w: (x, w, 1e-6, w.expand(4, 64)), "rms_norm: out is written, but several of its elements"),
    (lambda x, w: (x, torch.randn(63), 1e-6), "rms_norm: weight must be [64]"),
    (lambda x, w: (x, w.to("meta"), 1e-6), "rms_norm: weight must be on x's device"),
])
def test_a_bad_call_after_good_ones_gets_the_checks_answer_every_time(fastcall, bad, words):
    row, checks, launched = _rms_norm_row(fastcall)
    x, w = torch.randn(4, 64), torch.randn(64)
    row(x, w, 1e-6)
    row(x, w, 1e-6, torch.empty(4, 64))
    before = len(launched)
    for _ in range(2):
        with pytest.raises(ValueError, match="^" + words.replace("[", r"\[")):
            row(*bad(x, w))
    assert len(launched) == before and row.remembered() == 2


def test_overlapping_tensors_are_keyed_by_where_they_lie(fastcall):
    """q and k as column slices of one qkv buffer (their byte ranges interleave) pass and are remembered with the
    distance between them; k moved onto q's columns is another key, and refused."""
    check = Counted(rotary_embedding.check)
    row = fastcall.OutFirst(lambda *a: None, "rotary_embedding", 2, check, None, -1)
    cache = torch.randn(32, 16)
    pos = torch.arange(4)

    def call(k_at):
        qkv = torch.randn(4, 3 * 64)
        row(pos, qkv[:, :64], qkv[:, k_at:k_at + 64], 16, cache, True)

    call(64)
    call(64)
    assert check.asked == 1
    with pytest.raises(ValueError, match="must not share memory"):
        call(32)
    with pytest.raises(ValueError, match="must not share memory"):
        call(32)
    assert check.asked == 3


def test_what_the_key_cannot_describe_is_checked_every_call(fastcall):
    row, checks, _ = _rms_norm_row(fastcall)

    class Sub(torch.Tensor):
        pass

    x, w = torch.randn(4, 64), torch.randn(64)
    for args, kwargs in [((x.as_subclass(Sub), w, 1e-6), {}),
                         ((x.to("meta"), w.to("meta"), 1e-6), {}),
                         ((x, w, 1e-6), {"out": None}),
                         ((x, w, 2 ** 70), {})]:          # an int past 64 bits
        for _ in range(2):
            try:
                row(*args, **kwargs)
            except (TypeError, ValueError, RuntimeError):
                pass
    assert checks.asked == 7  # each twice, but for out=None: a keyword out is keyed (as None), so asked once


def test_a_check_that_reads_values_on_a_device_is_asked_every_call_there(fastcall):
    row, checks, _ = _rms_norm_row(fastcall, values_read_on=("cpu",))
    for _ in range(3):
        row(torch.randn(4, 64), torch.randn(64), 1e-6)
    assert checks.asked == 3 and row.remembered() == 0
