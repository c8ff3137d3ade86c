"""Whether torch.compile(mode="reduce-overhead") can form its CUDA graphs for a model, and whether it did.

reduce-overhead compiles as the default mode does, then wraps each graph in CUDA-graph trees, unless Inductor
finds a reason not to; then it logs ``skipping cudagraphs due to <reason>`` once, bumps a counter, and runs the
graph without CUDA graphs, as fast as the default mode and no faster. The commonest reason in an inference layer
is "mutated inputs": the graph writes a tensor it was given that is not a static input (a parameter, a buffer,
or a tensor marked with torch._dynamo.mark_static_address). Written static inputs are allowed: the trees keep
their addresses fixed (torch/_inductor/cudagraph_utils.py, check_for_mutation; the rule of torch 2.11 and 2.13).

- :func:`input_mutations` says which graph inputs a compiled function writes and which of those are static, on
  any device (Dynamo and AOT autograd only, no Inductor): the "mutated inputs" check, answerable on a CPU.
- :class:`CudagraphWatch` says, around compiled calls on a GPU, whether Inductor skipped CUDA graphs (its skip
  counter and log records, with the reasons) and how many graphs the trees recorded.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

__all__ = ["CudagraphWatch", "GraphMutations", "Traced", "input_mutations", "recorded_graphs"]

#: What Inductor says when it runs a graph without CUDA graphs (both phrasings are in its sources).
SKIP_WORDS = ("skipping cudagraphs", "disabling cudagraphs")


@dataclass(frozen=True)
class GraphMutations:
    """One compiled graph's inputs (Dynamo's placeholder names) that it writes, static or not."""

    inputs: tuple[str, ...]
    mutated: tuple[str, ...]
    static: tuple[str, ...]

    @property
    def blocking(self) -> tuple[str, ...]:
        """Written inputs that are not static: each one makes reduce-overhead skip this graph's CUDA graphs."""
        return tuple(n for n in self.mutated if n not in self.static)


@dataclass(frozen=True)
class Traced:
    """What :func:`input_mutations` saw: the call's result (run through the traced graphs) and each graph."""

    result: Any
    graphs: list[GraphMutations]


def input_mutations(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Traced:
    """Trace ``fn(*args, **kwargs)`` with torch.compile(fullgraph=True) (Dynamo, then AOT autograd's
    functionalisation, no codegen), run it once under no_grad, and return the result with each graph's written
    inputs."""
    from torch._dynamo.backends.common import aot_autograd

    found: list[GraphMutations] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        names = tuple(n.name for n in gm.graph.nodes if n.op == "placeholder")

        def forward(aot_gm: torch.fx.GraphModule, _inputs: list[Any]) -> Callable[..., Any]:
            meta = torch._guards.TracingContext.get().fw_metadata
            mutated = [i for i, info in enumerate(meta.input_info) if info.mutates_data or info.mutates_metadata]
            found.append(GraphMutations(names, tuple(names[i] for i in mutated),
                                        tuple(names[i] for i in meta.static_input_indices)))
            return aot_gm

        return aot_autograd(fw_compiler=forward, keep_inference_input_mutations=True)(gm, example_inputs)

    with torch.no_grad():
        result = torch.compile(fn, fullgraph=True, backend=backend)(*args, **kwargs)
    return Traced(result, found)


def recorded_graphs(device: torch.device | str | int | None = None) -> int | None:
    """CUDA graphs the cudagraph trees of ``device`` hold (None where this torch keeps them otherwise)."""
    from torch._inductor import cudagraph_trees

    index = torch.device("cuda", torch.cuda.current_device()).index if device is None else (
        device if isinstance(device, int) else torch.device(device).index or 0)
    try:
        manager = cudagraph_trees.get_manager(index, create_if_none_exists=False)
        if manager is None:
            return 0
        stack = [node for nodes in manager.roots.values() for node in nodes]
        count = 0
        while stack:
            node = stack.pop()
            count += 1
            stack += [child for children in node.children.values() for child in children]
        return count
    except (AttributeError, TypeError):
        return None


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(word in message for word in SKIP_WORDS):
            self.messages.append(message)


@dataclass
class CudagraphWatch:
    """``with CudagraphWatch() as watch: <compile and call>``; then ``watch.skips``, ``watch.reasons``,
    ``watch.graphs`` (recorded while watched; None if unknown) and ``watch.formed``."""

    device: torch.device | str | int | None = None
    skips: int = 0
    reasons: list[str] = field(default_factory=list)
    graphs: int | None = None
    _handler: _Records = field(default_factory=_Records, repr=False)
    _skips0: int = 0
    _graphs0: int | None = None

    def __enter__(self) -> "CudagraphWatch":
        from torch._dynamo.utils import counters

        self._skips0 = counters["inductor"]["cudagraph_skips"]
        self._graphs0 = recorded_graphs(self.device)
        logging.getLogger("torch._inductor").addHandler(self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        from torch._dynamo.utils import counters

        logging.getLogger("torch._inductor").removeHandler(self._handler)
        self.skips = counters["inductor"]["cudagraph_skips"] - self._skips0
        self.reasons = [m.splitlines()[0] for m in self._handler.messages]
        now = recorded_graphs(self.device)
        self.graphs = None if now is None or self._graphs0 is None else now - self._graphs0

    @property
    def formed(self) -> bool:
        """No graph was skipped, and the trees recorded at least one (where their count is known)."""
        return self.skips == 0 and not self.reasons and (self.graphs is None or self.graphs > 0)

    def summary(self) -> str:
        graphs = "unknown" if self.graphs is None else str(self.graphs)
        if self.formed:
            return f"cudagraphs formed ({graphs} recorded)"
        why = "; ".join(self.reasons) or (f"{self.skips} skip(s), {graphs} graph(s) recorded" if self.skips else
                                          "no graph recorded, no skip while watched (its graph was compiled, and "
                                          "any skip logged, before)")
        return f"cudagraphs NOT formed: {why}"
