"""``%load_ext rapid_llm``: register the magics and the renderers; everything heavy loads when used."""
from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """Register %%cuda_jit (its Magics instance also joins ``%config``'s configurables) and the renderers."""
    from rapid_llm.notebook import native_output, render
    from rapid_llm.notebook.magics import CudaJitMagics

    ipython.register_magics(CudaJitMagics(shell=ipython))
    render.attach(ipython)
    native_output.attach(ipython)  # a kernel's printf shows in the cell that ran it


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
