"""rapid_llm.kernels: ops that dispatch to the best verified row, and the API around them.

Everything here is lazy: importing this package imports neither triton, nor
torch.utils.cpp_extension, nor jit.py. Names resolve on first attribute access.
"""
from __future__ import annotations

import importlib
from typing import Any

#: public name -> (module, attribute). Ops map to the dispatcher.
_EXPORTS: dict[str, tuple[str, str]] = {
    # the registry
    "KernelSpec": ("rapid_llm.kernels.spec", "KernelSpec"),
    "GoldenRecord": ("rapid_llm.kernels.spec", "GoldenRecord"),
    "UNMEASURED": ("rapid_llm.kernels.spec", "UNMEASURED"),
    "Availability": ("rapid_llm.kernels.spec", "Availability"),
    "RegistryError": ("rapid_llm.kernels.spec", "RegistryError"),
    "register": ("rapid_llm.kernels.spec", "register"),
    "unregister": ("rapid_llm.kernels.spec", "unregister"),
    "get_row": ("rapid_llm.kernels.dispatch", "get_row"),
    "rows_for": ("rapid_llm.kernels.dispatch", "rows_for"),
    # dispatch
    "resolve": ("rapid_llm.kernels.dispatch", "resolve"),
    "explain": ("rapid_llm.kernels.dispatch", "explain"),
    "get_op": ("rapid_llm.kernels.dispatch", "get_op"),
    # golden verification
    "verify": ("rapid_llm.kernels.golden", "verify"),
    "register_reference": ("rapid_llm.kernels.golden", "register_reference"),
}

#: op name -> the group module that registers its rows.
_OPS: dict[str, str] = {
    "scale": "rapid_llm.kernels.ops.elementwise",
}

__all__ = sorted([*_EXPORTS, *_OPS])


def __getattr__(name: str) -> Any:
    if name in _OPS:
        importlib.import_module(_OPS[name])
        from rapid_llm.kernels.dispatch import get_op

        op = get_op(name)
        globals()[name] = op  # later lookups skip __getattr__
        return op
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rapid_llm.kernels' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
