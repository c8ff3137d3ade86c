"""Refuse a CUDA-graph figure whose back-to-back calls overlap one another through programmatic dependent launches.

A graph figure (``bench(..., graph=True)``: the ``graph_us`` that dispatch ranks captured and compiled calls by,
rapid_llm.bench.ops._graph_us) is a replay of ``calls`` calls back to back divided by ``calls``. A kernel launched
as a programmatic dependent launch may start before the kernel before it ends, so where call i+1's kernel
depends programmatically on call i's, the two overlap and the figure is less than a call costs alone. The
project's rows launch that way only through ``rl::launch_dependent``, which ``plain_launches()`` (the binding's
switch) turns into plain launches while a graph figure is timed. A row that launches its own kernels with the
programmatic attribute (cuLaunchKernelEx, ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``) is not
reached by the switch: its calls still overlap in the graph. That is refused: ``dependent_overlap``.

How it is seen: the graph is captured with ``torch.cuda.CUDAGraph(keep_graph=True)`` and its edges read with the
driver's ``cuGraphGetEdges_v2``. Stream capture turns a programmatic launch into an edge of type
CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC (or from a kernel's programmatic or launch-order port) into the launched
kernel's node. Edges inside one call are the row's own business (a caller gets that overlap wherever it calls
the row), so where the graph has programmatic edges, a graph of one call is captured as well: only edges beyond
``calls`` times that one call's join consecutive calls. A driver without ``cuGraphGetEdges_v2`` (before CUDA
12.3, which brought edge data and programmatic edges in graphs) is asked through ``cuGraphGetEdges``, which
answers CUDA_ERROR_LOSSY_QUERY for a graph with any edge that carries data: then "at least one" stands for the
count. Where neither can be asked (no driver, a torch without ``keep_graph``), nothing is refused.

The check applies while the binding's dependent launches are off (plain_launches(), or turned off): with them
on, a graph of the project's rows has programmatic edges by the caller's choice
(benchmarks/models/bench_dependent_launch.py measures exactly that), and the figure includes that overlap.
Eager timing is unchanged: each timed call sits between its own events, where nothing overlaps it.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable

import torch

from rapid_llm.bench.integrity import BenchRefused

__all__ = ["KIND", "kept_graph", "ready", "programmatic_edges", "count_programmatic", "refuse_overlap"]

KIND = "dependent_overlap"
#: CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC; a from_port other than 0 (CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC or
#: _LAUNCH_ORDER) also lets the downstream kernel start before the upstream one completes.
_PROGRAMMATIC = 1
_SUCCESS = 0


class EdgeData(ctypes.Structure):
    """CUgraphEdgeData (cuda.h, CUDA 12.3+). All zero: full completion of the upstream node first."""

    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte),
                ("reserved", ctypes.c_ubyte * 5)]


def count_programmatic(edges: Any) -> int:
    """How many of ``edges`` (EdgeData, or anything with from_port and type) let a kernel start early."""
    return sum(1 for e in edges if e.type == _PROGRAMMATIC or e.from_port != 0)


_driver: list[Any] = []


def _cu() -> Any | None:
    """The CUDA driver (libcuda), loaded on first need; None where there is none (a CPU machine)."""
    if not _driver:
        try:
            _driver.append(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            _driver.append(None)
    return _driver[0]


def kept_graph() -> torch.cuda.CUDAGraph:
    """A CUDAGraph that keeps its cudaGraph_t after capture (its edges can then be read), where torch can."""
    try:
        return torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:  # a torch before keep_graph: the figure is timed, its edges unread
        return torch.cuda.CUDAGraph()


def ready(graph: torch.cuda.CUDAGraph) -> None:
    """Instantiate a kept graph now, so the first timed replay does not pay for it."""
    instantiate = getattr(graph, "instantiate", None)
    if instantiate is not None:
        try:
            instantiate()
        except RuntimeError:  # a graph torch instantiated at capture's end (not kept)
            pass


def programmatic_edges(graph: torch.cuda.CUDAGraph) -> int | None:
    """The programmatic edges of a captured, kept graph (1 for "at least one" where only cuGraphGetEdges can
    say); None where they cannot be read."""
    cu = _cu()
    try:
        handle = ctypes.c_void_p(int(graph.raw_cuda_graph()))
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None
    if cu is None or not handle.value:
        return None
    n = ctypes.c_size_t(0)
    get = getattr(cu, "cuGraphGetEdges_v2", None)
    if get is not None:
        if get(handle, None, None, None, ctypes.byref(n)) != _SUCCESS:  # room for every pair of nodes instead
            if cu.cuGraphGetNodes(handle, None, ctypes.byref(n)) != _SUCCESS:
                return None
            n.value = n.value * n.value
        count = n.value
        if count == 0:
            return 0
        ends = (ctypes.c_void_p * count)(), (ctypes.c_void_p * count)()
        data = (EdgeData * count)()
        if get(handle, ends[0], ends[1], data, ctypes.byref(n)) != _SUCCESS:
            return None
        return count_programmatic(data[:n.value])
    get = getattr(cu, "cuGraphGetEdges", None)
    if get is None or get(handle, None, None, ctypes.byref(n)) != _SUCCESS:
        return None
    if n.value == 0:
        return 0
    ends = (ctypes.c_void_p * n.value)(), (ctypes.c_void_p * n.value)()
    result = get(handle, ends[0], ends[1], ctypes.byref(n))
    return 1 if _error_name(cu, result) == "CUDA_ERROR_LOSSY_QUERY" else 0 if result == _SUCCESS else None


def _error_name(cu: Any, result: int) -> str:
    name = ctypes.c_char_p()
    if result == _SUCCESS or cu.cuGetErrorName(result, ctypes.byref(name)) != _SUCCESS or not name.value:
        return ""
    return name.value.decode()


def _dependent_launches_on() -> bool:
    """Whether the binding launches rl::launch_dependent kernels programmatically now (never built: no)."""
    from rapid_llm.kernels.toolchain.fastpath import binding

    if binding.fastcall.cache_info().currsize == 0:
        return False
    module = binding.fastcall()
    was = module.set_dependent_launch(False)
    module.set_dependent_launch(was)
    return bool(was)


def refuse_overlap(graph: torch.cuda.CUDAGraph, calls: int, one_call: Callable[[], Any]) -> None:
    """Raise BenchRefused(dependent_overlap) where programmatic edges in ``graph`` (``calls`` calls back to back)
    join one call to the next; ``one_call`` captures the count of one call's own edges. See the module docstring."""
    if _dependent_launches_on():
        return
    many = programmatic_edges(graph)
    if not many:
        return
    alone = kept_graph()
    with torch.cuda.graph(alone):
        one_call()
    own = programmatic_edges(alone) or 0
    del alone
    joining = many - calls * own
    if joining > 0:
        raise BenchRefused(KIND, "", f"{joining} programmatic edge(s) join consecutive calls in the graph of {calls} "
                           f"back-to-back calls ({many} in all, {own} inside one call), made by launches that "
                           "plain_launches() does not reach: each call may start before the one before it ends")
