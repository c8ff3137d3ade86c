"""``%load_ext rapid_llm``: register the magics; everything heavy loads when a magic runs."""
from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """Register %%cuda_jit (its Magics instance also joins ``%config``'s configurables)."""
    from rapid_llm.notebook.magics import CudaJitMagics

    ipython.register_magics(CudaJitMagics(shell=ipython))


def unload_ipython_extension(ipython: Any) -> None:
    """Remove %%cuda_jit and its configurable; rows and bound functions stay as they are."""
    manager = ipython.magics_manager
    instance = manager.registry.pop("CudaJitMagics", None)
    manager.magics["cell"].pop("cuda_jit", None)
    if instance is not None and instance in ipython.configurables:
        ipython.configurables.remove(instance)
