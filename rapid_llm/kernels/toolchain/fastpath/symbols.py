"""Which kernels the host code launches, and which the device code defines.

The host pass declares kernels with ``__global__``, which the light header
turns into a weak declaration: a launched kernel is therefore a weak,
undefined symbol of the host object. binutils (``nm``, ``c++filt``, present
wherever the host compiler is) list and demangle them.
"""
from __future__ import annotations

import dataclasses
import struct
import subprocess
from pathlib import Path

__all__ = ["KernelRef", "launched_kernels", "demangle", "cubin_functions"]

# Weak undefined symbols the C++ runtime itself may leave in an object.
_RUNTIME_WEAK = ("pthread_", "__pthread", "_ITM_", "__gmon_start__", "__cxa_", "__tls_", "_Jv_", "__libc_")


@dataclasses.dataclass(frozen=True)
class KernelRef:
    """A kernel the host code launches: its symbol, its C++ spelling, its name expression."""

    symbol: str
    demangled: str

    @property
    def is_template(self) -> bool:
        return self.name_expression.endswith(">")

    @property
    def name_expression(self) -> str:
        """``void scale_kernel<float>(float*, long)`` -> ``scale_kernel<float>`` (what NVRTC instantiates)."""
        text = self.demangled
        if not text.endswith(")"):
            return text  # extern "C": not mangled
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                head = text[:i]
                break
        else:
            return text
        return head[5:] if head.startswith("void ") else head

    @property
    def instantiation(self) -> str:
        """An explicit instantiation of a template kernel, for compilers without name expressions."""
        return f"template __global__ {self.demangled};"


def _run(cmd: list[str], stdin: str | None = None) -> str:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return proc.stdout


def launched_kernels(obj: Path) -> list[KernelRef]:
    """The kernels referenced by the host object ``obj``, sorted by symbol."""
    symbols = []
    for line in _run(["nm", "-u", "-P", str(obj)]).splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] in ("w", "v") and not parts[0].startswith(_RUNTIME_WEAK):
            symbols.append(parts[0])
    return demangle(sorted(set(symbols)))


def demangle(names: list[str]) -> list[KernelRef]:
    """Each symbol with its C++ spelling (one c++filt run for all)."""
    if not names:
        return []
    demangled = _run(["c++filt"], "\n".join(names) + "\n").splitlines()
    return [KernelRef(s, d.strip()) for s, d in zip(names, demangled)]


def cubin_functions(cubin: bytes) -> set[str]:
    """Names of the global functions in a cubin (an ELF64 object): the kernels it defines."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], 24):
            st_name, st_info = struct.unpack_from("<IB", cubin, off)
            if st_info & 0xF == 2 and st_info >> 4 in (1, 2):  # STT_FUNC; STB_GLOBAL or STB_WEAK (templates)
                start = strtab[4] + st_name
                names.add(cubin[start:cubin.index(b"\0", start)].decode())
    return names
