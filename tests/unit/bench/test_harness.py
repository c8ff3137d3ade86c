"""The harness on CPU rows (on a GPU: tests/gpu/unit/bench/test_harness.py). Speed is reported, never asserted."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from rapid_llm.bench import BenchResult, bench, bench_host, bench_stateful, copy_roofline
from rapid_llm.bench.harness import COLD_FACTOR, MAX_ROTATION_SETS, rotation_sets
from rapid_llm.bench.integrity import BenchRefused, Guard


def _check_shape(r: BenchResult) -> None:
    assert r.median_us > 0 and r.p20_us <= r.median_us <= r.p80_us
    assert r.repeats == len(r.samples_us)


def test_cpu_bench_is_labelled_cpu_with_throughput():
    x = torch.randn(4096)
    out = torch.empty_like(x)
    r = bench(torch.mul, x, 2.0, out=out, bytes_moved=2 * x.nbytes, flops=x.numel(), repeats=7)
    _check_shape(r)
    assert r.kind == "cpu" and r.is_cpu and r.device == "cpu"
    assert r.gbps == pytest.approx(2 * x.nbytes / (r.median_us * 1e-6) / 1e9)
    assert r.tflops == pytest.approx(x.numel() / (r.median_us * 1e-6) / 1e12)
    assert r.roofline_gbps == copy_roofline("cpu")
    assert r.roofline_fraction == pytest.approx(r.gbps / r.roofline_gbps)
    assert "CPU numbers" in str(r)
    assert torch.equal(out, x * 2.0)  # the bench wrote torch.mul's own result into out


def test_without_work_size_there_is_no_throughput():
    r = bench(torch.neg, torch.randn(64), repeats=3)
    assert r.gbps is None and r.tflops is None and r.roofline_fraction is None
    assert set(r.figures()) >= {"median_us", "p20_us", "p80_us", "gbps", "roofline_fraction", "device"}


def test_stateful_reset_runs_before_every_call():
    state = torch.zeros(8)
    seen = []

    def append(buf):
        seen.append(float(buf.sum()))
        buf.add_(1.0)

    r = bench_stateful(append, lambda buf: buf.zero_(), state, warmup=2, repeats=5)
    assert r.repeats == 5
    assert seen == [0.0] * 7  # every call, warm-up included, starts from the reset state


def test_bench_host_counts_calls():
    calls = []
    r = bench_host(calls.append, 1, n=10, rounds=3, warmup=4)
    assert r.kind == "host" and "host-side" in str(r)
    assert len(calls) == 4 + 10 * 3
    _check_shape(r)


def test_copy_roofline_is_cached_per_device():
    first = copy_roofline("cpu")
    assert first > 0 and copy_roofline(torch.device("cpu")) is first


@pytest.mark.parametrize(
    "set_bytes, l2, expected",
    [
        (0, 50 << 20, 1),
        (1 << 30, 50 << 20, 1),  # one set already dwarfs L2: no clones
        (COLD_FACTOR * (50 << 20), 50 << 20, 1),
        (10 << 20, 50 << 20, 15),
        (100, 50 << 20, MAX_ROTATION_SETS),  # tiny sets: capped
        (4096, 0, 1),  # CPU: no L2 to defeat
    ],
)
def test_rotation_covers_l2(set_bytes, l2, expected):
    n = rotation_sets(set_bytes, l2)
    assert n == expected
    if 1 < n < MAX_ROTATION_SETS:
        assert n * set_bytes >= COLD_FACTOR * l2


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="bench: repeats must be >= 1"):
        bench(torch.neg, torch.randn(4), repeats=0)
    with pytest.raises(TypeError, match="bench: fn must be callable"):
        bench("neg", torch.randn(4))
    with pytest.raises(ValueError, match="graph=True needs CUDA"):
        bench(torch.neg, torch.randn(4), graph=True)
    with pytest.raises(TypeError, match="reset must be callable"):
        bench_stateful(torch.neg, None, torch.randn(4))
    with pytest.raises(ValueError, match="n must be >= 1"):
        bench_host(torch.neg, torch.randn(4), n=0)


def test_importing_the_harness_package_stays_light():
    code = ("import sys, rapid_llm.bench, rapid_llm.kernels.dispatch.measurements; "
            "heavy = [m for m in ('triton', 'matplotlib', 'ipywidgets', 'torch') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("make", [
    lambda: torch.randn(6, 16)[:, :8],                      # a row-strided slice
    lambda: torch.randn(8, 6).t(),                          # a transpose
    lambda: torch.randn(33)[1:],                            # an unaligned start
    lambda: torch.randn(4, 8),                              # dense
    lambda: torch.randn(0, 8)[:, :4],                       # empty
], ids=["rows", "transposed", "offset", "dense", "empty"])
def test_rotation_copies_keep_each_arguments_layout(make):
    from rapid_llm.bench.harness import clone_layout

    t = make()
    c = clone_layout(t)
    assert c.shape == t.shape and c.stride() == t.stride() and torch.equal(c, t)
    assert c.storage_offset() * c.element_size() % 16 == t.storage_offset() * t.element_size() % 16
    assert c.numel() == 0 or c.data_ptr() != t.data_ptr()


class _ProbeOnly:
    """A Guard that only runs the memo probe: its passes are given, not timed."""

    looks_like_memo = staticmethod(Guard.looks_like_memo)
    medians_apart = staticmethod(Guard.medians_apart)
    judge_memo = Guard.judge_memo

    def check(self, *args):
        pass

    def probe_passes(self, fn, repeats):
        return "seen", "new"

    def memo_key(self, fn):
        return ("probe-only", id(fn))


def _passes(seen_rounds):
    """timed_pass for _judge: each seen pass takes the next list of seen_rounds, every new pass 10 us a call."""
    seen = iter(seen_rounds)
    calls = []

    def timed_pass(kind):
        calls.append(kind)
        return list(next(seen)) if kind == "seen" else [10.0] * 5
    return timed_pass, calls


def test_a_stall_in_one_memo_probe_round_does_not_clear_a_memo():
    """One seen call slowed past every new call (a loaded machine) spoils a round; the probe runs it again."""
    from rapid_llm.bench import harness

    stalled, fast = [1.0, 1.0, 50.0, 1.0, 1.0], [1.0] * 5
    timed_pass, calls = _passes([stalled, fast, fast, fast, fast, fast])
    with pytest.raises(BenchRefused) as caught:
        harness._judge(_ProbeOnly(), lambda: None, None, timed_pass, "memo")
    assert caught.value.kind == "content_memo"
    assert calls.count("seen") == 6  # the spoiled round, then the two that confirm


def test_an_honest_row_is_cleared_after_one_memo_probe_round():
    from rapid_llm.bench import harness

    timed_pass, calls = _passes([[10.0] * 5] * 2)
    harness._judge(_ProbeOnly(), lambda: None, None, timed_pass, "honest")
    assert calls == ["seen", "new", "new", "seen"]
