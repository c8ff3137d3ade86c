"""The harness on a GPU: cold sets rotated, eager and in a graph; stateful and host timing. Speed is reported, never
asserted. The CPU checks, and the helpers these use, are in tests/unit/bench/test_harness.py.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.bench import bench, bench_host, bench_stateful
from tests.unit.bench.conftest import isolated_store  # noqa: F401 - autouse: each bench test gets its own store
from tests.unit.bench.test_harness import _check_shape

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("graph", [False, True])
def test_gpu_bench_rotates_cold_sets(graph):
    x = torch.randn(1 << 16, device="cuda")
    out = torch.empty_like(x)
    r = bench(torch.mul, x, 2.0, out=out, bytes_moved=2 * x.nbytes, graph=graph, repeats=20)
    _check_shape(r)
    assert r.kind == "cuda" and not r.is_cpu and r.graph is graph
    assert r.rotation_sets > 1 and r.device == torch.cuda.get_device_name()
    assert r.roofline_fraction is not None
    assert torch.equal(out, x * 2.0)  # the bench wrote torch.mul's own result into out


def test_gpu_stateful_and_host():
    buf = torch.zeros(1024, device="cuda")
    r = bench_stateful(lambda b: b.add_(1.0), lambda b: b.zero_(), buf, repeats=10)
    assert r.kind == "cuda"
    torch.cuda.synchronize()
    assert float(buf.max()) <= 1.0  # the first set was reset before each of its calls
    h = bench_host(torch.mul, buf, 2.0, n=50, rounds=3)
    assert h.kind == "host"
