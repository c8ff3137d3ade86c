"""Measured figures on a GPU: a CUDA-graph capture records the device-time winner after one eager call. The CPU
checks, with the fixtures and helpers this uses, are in tests/unit/bench/test_store_and_priority.py.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.dispatch import measurements
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.opdecl import declare_op
from tests.unit.bench.conftest import isolated_store  # noqa: F401 - autouse: each bench test gets its own store
from tests.unit.bench.test_store_and_priority import _REFERENCE, _case, _mul, _three_rows
from tests.unit.bench.test_store_and_priority import serve_interpreter  # noqa: F401 - autouse there, so here too

pytestmark = pytest.mark.gpu


def test_a_cuda_graph_captures_the_device_time_winner_after_one_eager_call():
    """The whole path on a GPU: the eager call runs the caller rule's row and readies the device rule's; the
    capture then records the device rule's row, and explain inside the capture names the rule."""
    import rapid_llm.kernels as K

    ran = []

    def tagged(tag):
        def row(x, f, out=None):
            ran.append(tag)
            return _mul(x, f, out)
        return row

    rows = _three_rows("prio", _mul, tagged("a"), tagged("b"), devices=("cuda",), floor_devices=("cpu", "cuda"))
    with spec.isolated():
        declare_op("prio", rows=rows, reference=_REFERENCE, bench=_case)
        name = platform.device_label(torch.device("cuda"))
        measurements.record("prio", "triton/prio_a", name, "fp32", 1024, 2.0, host_us=30.0, graph_us=2.0)
        measurements.record("prio", "jit/prio_b", name, "fp32", 1024, 3.0, host_us=4.0, graph_us=3.0)
        x = torch.randn(1024, device="cuda")
        torch.testing.assert_close(K.prio(x, 3.0), x * 3.0)
        assert ran == ["b", "a"]  # the caller's row, then the capture's once on copies
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = K.prio(x, 3.0)
            inside = str(K.explain("prio", x))
        assert ran == ["b", "a", "a"] and "measured rows ranked by device time" in inside
        x.copy_(torch.ones_like(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, torch.full_like(x, 3.0))
