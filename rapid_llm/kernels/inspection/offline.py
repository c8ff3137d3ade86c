"""``compile_for``: what the compiler makes of a Triton or Gluon kernel for a GPU that is not here.

Triton compiles a kernel at its first launch, for the GPU it launches on, so
without a GPU ``inspect(row)`` has nothing to read. Triton's compiler itself
needs no GPU: given the kernel's signature (its arguments' types and its
constexprs) and a target (``sm_90``), it writes the IR, the PTX and a cubin with
the ptxas Triton ships. This reads the same build facts ``inspect`` reads from a
launched kernel: registers and spills (ptxas's report on that PTX), the PTX, the
``ttgir`` (for a Gluon kernel, its layouts as written) and the SASS where
``cuobjdump`` or ``nvdisasm`` is installed. Nothing runs: numbers need a GPU.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rapid_llm.kernels.inspection.inspector import Inspection, sass_of
from rapid_llm.kernels.toolchain.buildfacts import notable, parse_ptxas

__all__ = ["compile_for"]


def compile_for(kernel: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None, *,
                arch: int = 90, num_warps: int = 4, aligned: Sequence[str] = (), row: str | None = None) -> Inspection:
    """Compile ``kernel`` (a ``@triton.jit`` or ``@gluon.jit`` function) for ``sm_<arch>`` without launching it.

    ``signature`` gives each runtime argument's Triton type (``"*bf16"``, ``"i32"``, ``"fp32"``); ``constexprs``
    the value of each constexpr. ``aligned`` names the arguments Triton's launcher would find divisible by 16
    (pointers from torch's allocator, sizes that are multiples of 16): what lets it emit 16-byte accesses.
    ``num_warps`` is the launch's. Returns an :class:`Inspection` of the one kernel, titled ``row`` (default:
    the kernel's name), whose ``code(symbol, kind)`` gives its ``ttgir``, ``ptx`` and (where a tool can read the
    cubin) ``sass``. Needs Triton's interpreter off (``TRITON_INTERPRET`` unset when Triton is imported): it
    decorates Triton's own library functions (``tl.sum``'s combine) for the interpreter, and the compiler
    cannot use those.
    """
    constexprs = dict(constexprs or {})
    names = list(getattr(kernel, "arg_names", ()))
    missing = [n for n in names if n not in signature and n not in constexprs]
    unknown = [n for n in (*signature, *constexprs, *aligned) if names and n not in names]
    if missing or unknown:
        raise ValueError(f"compile_for({_name(kernel)}): " + "; ".join(
            part for part in (f"no type or value for {', '.join(missing)}" if missing else "",
                              f"not an argument: {', '.join(unknown)}" if unknown else "") if part))
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError(f"compile_for({_name(kernel)}): Triton's interpreter is on (TRITON_INTERPRET=1), so "
                           "Triton's library functions were made for it and cannot be compiled in this process; "
                           "unset TRITON_INTERPRET before Triton is imported (a fresh process)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas

    sig = {n: signature.get(n, "constexpr") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    compiled = triton.compile(_source(kernel, sig, constexprs, attrs), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps})
    ptx = compiled.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        gpu_name = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"  # Triton compiles Hopper and later for sm_XXa
        log = subprocess.run([get_ptxas(arch).path, "-v", "--gpu-name", gpu_name, str(path), "-o", "/dev/null"],
                             capture_output=True, text=True, check=True).stderr
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        sass, why_no_sass = sass_of(cubin)
    name = compiled.metadata.name
    shown = [str(constexprs[n]) if sig[n] == "constexpr" else sig[n] for n in names]
    symbol = f"{name}[{','.join(shown)}]"
    facts = next(iter(parse_ptxas(log).values()))
    facts = replace(facts, symbol=symbol, name=f"{name}({', '.join(shown)})",
                    smem_static=int(compiled.metadata.shared or 0), threads_per_block=32 * num_warps)
    result = Inspection(row or name, 32 * num_warps, facts={symbol: facts}, ptx=ptx, sass=sass)
    result.kernel_code = {symbol: {kind: text for kind, text in (("ttgir", compiled.asm.get("ttgir")), ("ptx", ptx),
                                                                  ("sass", sass)) if text}}
    result.notes.append(f"compiled for sm_{arch} with Triton {triton.__version__}, not launched: build facts only "
                        "(no GPU was asked for its occupancy)")
    if why_no_sass:
        result.notes.append(why_no_sass)
    result.notes += [f"notable: {n}" for n in notable(result.facts)]
    return result


def _name(kernel: Any) -> str:
    return getattr(getattr(kernel, "fn", kernel), "__name__", repr(kernel))


def _source(kernel: Any, signature: dict[str, str], constexprs: dict[str, Any], attrs: dict) -> Any:
    """Triton's compile source for ``kernel``: a Gluon kernel's is Gluon's own (it lowers its layouts as written)."""
    if type(kernel).__module__.startswith("triton.experimental.gluon"):  # Gluon has no interpreter: always compiled
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    from triton.compiler import ASTSource

    return ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
