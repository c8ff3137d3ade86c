"""rapid_llm.kernels: ops that dispatch to the best verified row, and the API around them.

Everything here is lazy: importing this package imports neither triton, nor
torch.utils.cpp_extension, nor jit.py. Names resolve on first attribute access;
every declared op (shipped or declared in a notebook) is reachable as
``rapid_llm.kernels.<op>``, and as ``torch.ops.rapid_llm.<op>`` once ``register_torch_ops()`` (or any use of
the registry) has run: defining the schemas here would import torch.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any

#: public name -> (module, attribute). Ops map to the dispatcher.
_EXPORTS: dict[str, tuple[str, str]] = {
    # the registry
    "KernelSpec": ("rapid_llm.kernels.registry.spec", "KernelSpec"),
    "GoldenRecord": ("rapid_llm.kernels.registry.spec", "GoldenRecord"),
    "Availability": ("rapid_llm.kernels.registry.spec", "Availability"),
    "RegistryError": ("rapid_llm.kernels.registry.spec", "RegistryError"),
    "register": ("rapid_llm.kernels.registry.spec", "register"),
    "unregister": ("rapid_llm.kernels.registry.spec", "unregister"),
    "get_row": ("rapid_llm.kernels.registry.spec", "get_row"),
    "rows_for": ("rapid_llm.kernels.registry.spec", "rows_for"),
    "all_ops": ("rapid_llm.kernels.registry.spec", "all_ops"),
    # declaring an op
    "declare_op": ("rapid_llm.kernels.registry.opdecl", "declare_op"),
    "restore_op": ("rapid_llm.kernels.registry.opdecl", "restore_op"),
    "define_op": ("rapid_llm.kernels.registry.opdecl", "define_op"),
    "get_decl": ("rapid_llm.kernels.registry.opdecl", "get_decl"),
    "Reference": ("rapid_llm.kernels.registry.opdecl", "Reference"),
    "CaseArgs": ("rapid_llm.kernels.registry.opdecl", "CaseArgs"),
    "JitRow": ("rapid_llm.kernels.toolchain.jit_row", "JitRow"),
    "promote": ("rapid_llm.kernels.toolchain.promote", "promote"),
    # dispatch
    "resolve": ("rapid_llm.kernels.dispatch.dispatcher", "resolve"),
    "explain": ("rapid_llm.kernels.dispatch.dispatcher", "explain"),
    "get_op": ("rapid_llm.kernels.dispatch.dispatcher", "get_op"),
    # every op as torch.ops.rapid_llm.<op>: the one call code written against torch.ops makes first
    "register_torch_ops": ("rapid_llm.kernels.dispatch.custom_ops", "register_torch_ops"),
    # golden verification
    "verify": ("rapid_llm.kernels.verification.golden", "verify"),
    "inspect": ("rapid_llm.kernels.inspection.inspector", "inspect"),
    "profile": ("rapid_llm.kernels.inspection.profiling", "profile"),
}

__all__ = sorted(_EXPORTS)

# The floors above the registry, wired in from here (the one place that sees them all), by reference, so this
# imports nothing heavy: the .cu rows in the op folders (kernels/ops/), and the Python modules there that declare
# a row on their first line, are found with the ops, and every
# declared op becomes a torch custom op.
from rapid_llm.kernels.registry import spec as _registry  # noqa: E402 - after the exports it serves

_registry.add_discoverer("rapid_llm.kernels.toolchain.jit_row:register_cu_rows")
_registry.add_discoverer("rapid_llm.kernels.toolchain.python_rows:register_py_rows")
_registry.on_declare("rapid_llm.kernels.dispatch.custom_ops:register")


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    # `from rapid_llm.kernels import platform` asks here before importing the submodule: let it.
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is None:
        spec = importlib.import_module("rapid_llm.kernels.registry.spec")
        if name in spec.all_ops():  # the dispatching op: one object per name, so it is cached here
            op = importlib.import_module("rapid_llm.kernels.dispatch.dispatcher").get_op(name)
            globals()[name] = op
            return op
    raise AttributeError(f"module 'rapid_llm.kernels' has no attribute {name!r}")


def __dir__() -> list[str]:
    return [*__all__, *importlib.import_module("rapid_llm.kernels.registry.spec").all_ops()]
