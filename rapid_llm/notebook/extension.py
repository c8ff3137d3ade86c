"""``%load_ext rapid_llm``: register the magics, the renderers and the notebook's verbs; everything heavy
loads when used."""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

__all__ = ["load_ipython_extension", "unload_ipython_extension", "VERBS"]

#: What a kernel author calls after %%cuda_jit, bound into the notebook (unless the name is taken there).
VERBS = {
    "verify": "rapid_llm.kernels.verification.golden:verify",
    "explain": "rapid_llm.kernels.dispatch.dispatcher:explain",
    "promote": "rapid_llm.kernels.toolchain.promote:promote",
    "inspect": "rapid_llm.kernels.inspection.inspector:inspect",
    "profile": "rapid_llm.kernels.inspection.profiling:profile",
    "bench_op": "rapid_llm.bench.ops:bench_op",
    "bench_plot": "rapid_llm.notebook.widgets:bench_plot",
    "compare": "rapid_llm.bench.compare:compare",
}


def _lazy(ref: str) -> Callable[..., Any]:
    """A function that imports its target on the first call (so %load_ext stays light)."""
    module, attr = ref.split(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), attr)(*args, **kwargs)

    call.__name__ = call.__qualname__ = attr
    call.__module__ = module
    call.__doc__ = f"{module}.{attr}, imported on first use (help({module}.{attr}) has its documentation)."
    call.rapid_llm_verb = ref  # type: ignore[attr-defined]
    return functools.update_wrapper(call, call, assigned=(), updated=())


def load_ipython_extension(ipython: Any) -> None:
    """Register %%cuda_jit (its Magics instance also joins ``%config``'s configurables) and the renderers."""
    from rapid_llm.notebook import native_output, render
    from rapid_llm.notebook.magics import CudaJitMagics

    ipython.register_magics(CudaJitMagics(shell=ipython))
    render.attach(ipython)
    native_output.attach(ipython)  # a kernel's printf shows in the cell that ran it
    for name, ref in VERBS.items():
        ipython.user_ns.setdefault(name, _lazy(ref))


def unload_ipython_extension(ipython: Any) -> None:
    """Remove %%cuda_jit and its configurable; rows and bound functions stay as they are."""
    manager = ipython.magics_manager
    instance = manager.registry.pop("CudaJitMagics", None)
    manager.magics["cell"].pop("cuda_jit", None)
    if instance is not None and instance in ipython.configurables:
        ipython.configurables.remove(instance)
    from rapid_llm.notebook import native_output, render

    render.detach(ipython)
    native_output.detach(ipython)
    for name, ref in VERBS.items():
        if getattr(ipython.user_ns.get(name), "rapid_llm_verb", None) == ref:
            del ipython.user_ns[name]
