"""A figure faster than a copy of the same bytes is flagged and never recorded: below L2 at once, above L2 past the
roofline's own margin (a persisting-L2 window keeps a working set larger than L2 resident through any flush)."""
from __future__ import annotations

import pytest
import torch

import rapid_llm.bench.harness as harness
from rapid_llm.bench.harness import BenchResult
from rapid_llm.bench.ops import implausible

CUDA = torch.device("cuda", 0)


def _result(us: float, nbytes: int) -> BenchResult:
    return BenchResult(us, us, us, 10, "test GPU", "cuda", bytes_moved=nbytes, roofline_gbps=1000.0, cold_l2=True)


@pytest.mark.parametrize("us, nbytes, flagged", [
    (0.5, 1 << 20, True),      # 2 TB/s on a 1000 GB/s roofline, 1 MiB < L2: impossible
    (2.0, 1 << 20, False),     # 524 GB/s: fine
    (150.0, 1 << 27, False),   # above L2: 895 GB/s, under the roofline
    (130.0, 1 << 27, False),   # 1032 GB/s: within the roofline's own 5 % margin
    (0.1, 1 << 27, True),      # 1342 TB/s on a 1000 GB/s roofline: the llm.c persisting-L2 figure, only larger
])
def test_faster_than_a_copy_is_flagged(monkeypatch, us, nbytes, flagged):
    monkeypatch.setattr(harness, "l2_bytes", lambda device=None: 50 << 20)
    why = implausible(_result(us, nbytes), CUDA)
    assert (why is not None) == flagged
    if flagged:
        assert ("less than L2" in why or "more than L2" in why) and "escaped the timer" in why


def test_cpu_figures_are_not_judged_against_l2():
    assert implausible(_result(0.001, 1 << 10), torch.device("cpu")) is None
