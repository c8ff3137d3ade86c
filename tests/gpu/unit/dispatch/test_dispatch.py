"""Dispatch on a GPU: a real CUDA-graph capture skips a graph-unsafe row, and strided CUDA inputs reach a row that
takes them. The CPU checks, with the fixtures and helpers these use, are in tests/unit/dispatch/test_dispatch.py.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.dispatch import dispatcher as dispatch
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from tests.unit.dispatch import test_dispatch as cpu_tests
from tests.unit.dispatch.test_dispatch import STRIDED_VIEWS
from tests.unit.dispatch.test_dispatch import op, serve_interpreter  # noqa: F401 - its fixtures, serve_interpreter autouse

pytestmark = pytest.mark.gpu


def test_real_capture_skips_graph_unsafe_rows(op, call_impl):
    """During torch.cuda.graph capture the unsafe row is skipped; outside it, it wins again."""
    calls = []

    def unsafe(x, factor):
        calls.append("unsafe")
        return x * float(torch.tensor(factor).item())  # host value baked in: not replay safe

    def native(x, factor):
        calls.append("native")
        return x * factor

    spec.register(KernelSpec(name=f"native/{op.name}", op=op.name, backend="native", target=native,
                             devices=("cpu", "cuda")), replace=True)
    op(f"jit/{op.name}", "jit", target=unsafe, graph_safe=False)
    call = dispatch.get_op(op.name)
    x = torch.ones(1024, device="cuda")
    call(x, 2.0)
    assert calls == ["unsafe"]
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        call(x, 2.0)  # warm the capture-side resolution outside capture too
    torch.cuda.synchronize()
    calls.clear()
    with torch.cuda.graph(graph):
        y = call(x, 3.0)
    assert calls == ["native"]
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.full_like(x, 3.0))
    assert dispatch.explain(op.name, x, capturing=True).verdict(f"jit/{op.name}").reason.startswith("not graph safe")


@pytest.mark.parametrize("device", ["cuda"])
@pytest.mark.parametrize("view", STRIDED_VIEWS)
def test_strided_inputs_reach_a_row_that_takes_them(view, device):
    cpu_tests.test_strided_inputs_reach_a_row_that_takes_them(view, device)
