"""On a GPU with Nsight Compute: profile() of scale's rows, and inspect()'s occupancy against the CUDA driver's.

    python -m pytest tests/kernels/test_profiling_gpu.py -m gpu -s
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.inspection import inspector as inspection, profiling

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
]


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
