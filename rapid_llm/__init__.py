"""rapid_llm: write, check, measure and ship GPU kernels for LLM inference, from Jupyter.

``%load_ext rapid_llm`` registers the notebook magics. Importing the package
is cheap: torch, triton and the JIT toolchain load only when first used.
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def load_ipython_extension(ipython: Any) -> None:
    """Register %%cuda_jit and friends (``%load_ext rapid_llm``)."""
    from rapid_llm.notebook.extension import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from rapid_llm.notebook.extension import unload_ipython_extension as _unload

    _unload(ipython)
