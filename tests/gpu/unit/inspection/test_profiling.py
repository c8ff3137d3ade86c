"""profile() and inspect() on a GPU: profile() of scale's rows against the copy roofline and of rms_norm against
torch.compile's kernel (with Nsight Compute), profile_one_call, and inspect()'s occupancy against the CUDA driver's.
ncu's CSV parsed from a captured run, and the answers where nothing can be measured, are in
tests/unit/inspection/test_profiling.py.

    python -m pytest tests/gpu/unit/inspection/test_profiling.py -s
"""
from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest
import torch

from rapid_llm.kernels.inspection import inspector as inspection, profiling

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _one_profiler_at_a_time():
    """One of these tests at a time across the suite's workers: two Nsight Compute runs on one GPU at once left
    one run's metrics empty (NaN, no bytes moved) in the suite on an H100 under -n 15; alone it passed."""
    with open(Path(tempfile.gettempdir()) / "rapid_llm_gpu_profiler.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.mark.skipif(profiling.ncu_path() is None, reason="needs Nsight Compute (ncu)")
def test_profile_of_scale_gives_each_row_its_kernels_against_the_copy_roofline():
    x = torch.randn(1 << 24, device="cuda", dtype=torch.bfloat16)
    result = profiling.profile("scale", x, 1.7, rows=["jit/scale", "native/scale"])
    print(result)
    assert result.problem is None, str(result)
    assert [k.row for k in result.kernels] == ["jit/scale", "native/scale"]
    assert result.copy is not None and result.bytes_moved == 4 * x.numel()
    for k in result.kernels:
        assert 0.2 < result.of_copy(k) < 1.5 and 0 < k.achieved_occupancy <= 100 and k.top_stalls()
        assert k.dram_read >= x.nbytes * 0.9  # a flushed cache: the input comes from DRAM


@pytest.mark.parametrize("row", ["jit/scale", "triton/scale"])
def test_occupancy_from_the_rules_is_what_the_driver_says(row):
    report = inspection.inspect(row)
    print(report)
    assert report.facts and set(report.driver_blocks) == set(report.facts), report.notes
    for symbol, blocks in report.driver_blocks.items():
        assert report.occupancy(symbol).blocks_per_sm == blocks, (symbol, report.notes)
        assert report.facts[symbol].max_threads >= report.block_size(symbol)  # the driver's largest block


@pytest.mark.skipif(profiling.ncu_path() is None, reason="needs Nsight Compute (ncu)")
def test_profile_against_compile_puts_inductors_kernel_beside_the_row():
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    result = profiling.profile("rms_norm", x, w, 1e-6, rows=["jit/rms_norm"], against_compile=True)
    print(result)
    assert result.problem is None, str(result)
    assert [k.row for k in result.kernels] == ["jit/rms_norm", "torch.compile(native/rms_norm)"]
    assert all(k.time_ns > 0 for k in result.kernels)


def test_profile_one_call_runs_the_call_once_in_the_range_and_returns_its_result():
    """The benchmark scripts' ncu helper calls fn exactly once, with its arguments, and hands back its result."""
    x = torch.arange(8, device="cuda", dtype=torch.float32)
    calls = []

    def double(t, scale=1.0):
        calls.append(1)
        return t * 2 * scale

    got = profiling.profile_one_call(double, "rapid_llm.test|double", x, scale=0.5)
    assert len(calls) == 1
    assert torch.equal(got, x)
