"""The harness's clock is its own, and what a row changes in the process is named: a timer's entry point
(timer_patched) or what the reference and the check call (checker_tampered)."""
from __future__ import annotations

import time

import pytest
import torch

from rapid_llm.bench import BenchRefused, bench, clock, integrity
from rapid_llm.bench.tamper import Watch


def test_the_checked_calls_bound_a_skipper_at_ten_percent():
    n = integrity.CHECKED_CALLS
    assert (1 - integrity.SKIP_FRACTION) ** n <= integrity.ESCAPE < (1 - integrity.SKIP_FRACTION) ** (n - 1)


def test_a_replaced_entry_point_is_named_and_put_back():
    real = time.perf_counter_ns
    watch = Watch()
    time.perf_counter_ns = lambda: 0
    with pytest.raises(BenchRefused) as caught:
        watch.check("row")
    assert caught.value.kind == "timer_patched" and "time.perf_counter_ns" in caught.value.detail
    assert time.perf_counter_ns is real and clock.python_replaced() == []


def test_a_rebound_torch_name_is_named_and_put_back():
    real = torch.add
    watch = Watch()
    torch.add = lambda *a, **k: None
    with pytest.raises(BenchRefused) as caught:
        watch.check("row")
    assert caught.value.kind == "checker_tampered" and "torch.add" in caught.value.detail
    assert torch.add is real


def test_a_method_added_to_tensor_is_named_and_removed():
    watch = Watch()
    torch.Tensor.__eq__ = lambda self, other: True
    with pytest.raises(BenchRefused) as caught:
        watch.check("row")
    assert caught.value.kind == "checker_tampered"
    assert "__eq__" not in vars(torch.Tensor)


def test_an_honest_run_changes_nothing_it_watches():
    before = Watch()
    bench(lambda x, f: x * f, torch.randn(4097), 2.0, repeats=5)
    before.check("honest")


def test_the_checked_calls_are_judged_as_their_copies_fill_memory(monkeypatch):
    """With room for one checked call's copies at a time, each is judged (and dropped) as soon as it is made."""
    from rapid_llm.bench import harness

    monkeypatch.setattr(harness, "CHECK_BYTES", 1)
    drained = []
    real = integrity.Guard.drain
    monkeypatch.setattr(integrity.Guard, "drain", lambda self, *a: (drained.append(len(self.after_copies)),
                                                                    real(self, *a))[1])
    bench(lambda x, f: x * f, torch.randn(4097), 2.0, repeats=40)
    assert len(drained) >= integrity.CHECKED_CALLS and max(drained) <= 1


def test_results_must_be_plain_tensors():
    assert integrity.not_plain((torch.ones(1), None)) is None
    assert "subclass" in integrity.not_plain(torch.nn.Parameter(torch.ones(1)))
    assert "where a tensor is due" in integrity.not_plain([torch.ones(1), 3.0])
