"""Build facts of a Triton (or Gluon) row's compiled kernels, from Triton's own records of them.

Triton compiles a kernel per specialisation (dtypes, divisibility, constexprs)
at its first launch and keeps each one on the ``@triton.jit`` function. A
compiled kernel knows its registers (``n_regs``), its local memory in 4-byte
words (``n_spills``: Triton's local memory is spilled registers), its shared
memory and its warps per block, and carries its PTX and cubin. Nothing here
imports Triton: a row's module already has.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from rapid_llm.kernels.toolchain.buildfacts import KernelFacts

__all__ = ["CompiledTriton", "compiled_kernels", "jit_functions"]


@dataclass(frozen=True)
class CompiledTriton:
    """One compiled specialisation of a ``@triton.jit`` function."""

    facts: KernelFacts
    ptx: str | None
    cubin: bytes | None
    ttgir: str | None = None  # Triton's GPU IR: for a Gluon kernel, the layouts it was written with


def jit_functions(target: Any) -> list[Any]:
    """The ``@triton.jit`` (and ``@gluon.jit``) functions of a row's target: those in the module of a
    ``"module:attr"`` target, or those a launcher function (a notebook's) names among its globals."""
    if isinstance(target, str):
        found = list(vars(importlib.import_module(target.partition(":")[0])).values())
    else:
        fn = getattr(target, "__wrapped__", target)
        names, scope = getattr(getattr(fn, "__code__", None), "co_names", ()), getattr(fn, "__globals__", {})
        found = [scope[n] for n in names if n in scope]
    return [v for v in found if hasattr(v, "device_caches") and hasattr(v, "fn")]


def _signature(key: Any) -> list[str]:
    """``['*bf16', '*bf16', 'fp32', 'i32', '4096']`` from Triton's cache key (a list of (type, specialisation))."""
    try:
        return [str(spec) if kind == "constexpr" else str(kind)
                for kind, spec in (key[0] if isinstance(key, tuple) else key)]
    except (TypeError, ValueError):
        return [str(key)[:80].replace(" ", "")]


def compiled_kernels(fn: Any) -> list[CompiledTriton]:
    """Every specialisation of ``fn`` compiled in this process, on any device, as build facts."""
    out = []
    for entry in getattr(fn, "device_caches", {}).values():
        cache = entry[0] if isinstance(entry, tuple) else entry
        for key, kernel in dict(cache).items():
            if getattr(kernel, "n_regs", None) is None and hasattr(kernel, "_init_handles"):
                kernel._init_handles()  # Triton loads the module, and learns its registers, at first launch
            md = kernel.metadata
            name = getattr(md, "name", getattr(fn, "__name__", "kernel"))
            arch = getattr(getattr(md, "target", None), "arch", "")
            warps = int(getattr(md, "num_warps", 0) or 0)
            local = 4 * int(getattr(kernel, "n_spills", 0) or 0)
            sig = _signature(_key_of(key))
            facts = KernelFacts(symbol=f"{name}[{','.join(sig)}]", name=f"{name}({', '.join(sig)})",
                                arch=f"sm_{arch}" if arch else "", registers=int(getattr(kernel, "n_regs", 0) or 0),
                                smem_static=int(getattr(md, "shared", 0) or 0), stack_frame=local,
                                spill_stores=local, threads_per_block=32 * warps,
                                max_threads=int(getattr(kernel, "n_max_threads", 0) or 0))
            asm = getattr(kernel, "asm", {}) or {}
            out.append(CompiledTriton(facts, asm.get("ptx"), asm.get("cubin"), asm.get("ttgir")))
    return out


def _key_of(key: Any) -> Any:
    """Triton 3.x keys a compiled kernel by ``str((signature, options))``; older ones by a tuple."""
    if isinstance(key, str):
        try:
            import ast

            cut = key.find("]{")  # "[signature]{options}"
            head = key[: cut + 1] if cut >= 0 else key
            return ast.literal_eval(head)
        except (ValueError, SyntaxError):
            return key
    return key
