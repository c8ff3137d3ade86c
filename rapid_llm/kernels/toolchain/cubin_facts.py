"""Build facts read from a cubin itself: registers, stack frame and static shared memory of each kernel.

A builder that runs ptxas verbose parses its report (rapid_llm.kernels.toolchain.buildfacts); one that gets a
finished cubin (the CuTe DSL compiles with a ptxas of its own, whose report it does not show, and whose PTX is
newer than a toolkit's ptxas may read) reads the same facts from the cubin's ELF: the ``.nv.info`` attributes
the driver reads (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and the size of each kernel's ``.nv.shared`` section. No
GPU and no CUDA tool is needed.
"""
from __future__ import annotations

import struct
from typing import Iterator

from rapid_llm.kernels.toolchain.buildfacts import KernelFacts

__all__ = ["kernel_facts"]

_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 4  # an attribute whose value is a u16 size and that many bytes
_EIFMT_HVAL, _EIFMT_BVAL = 3, 2


def _sections(cubin: bytes) -> list[tuple[str, int, int]]:
    """(name, file offset, size) of every section of an ELF64 cubin."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx][4]

    def name(offset: int) -> str:
        start = names + offset
        return cubin[start:cubin.index(b"\0", start)].decode()

    return [(name(s[0]), s[4], s[5]) for s in raw]


def _symbols(cubin: bytes, sections: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """(name, section index, value) of every symbol."""
    table = {n: (off, size) for n, off, size in sections}
    (sym_off, sym_size), (str_off, _) = table[".symtab"], table[".strtab"]
    found = []
    for off in range(sym_off, sym_off + sym_size, 24):
        name, _, _, shndx, value = struct.unpack_from("<IBBHQ", cubin, off)
        start = str_off + name
        found.append((cubin[start:cubin.index(b"\0", start)].decode(), shndx, value))
    return found


#: What a cubin's ``.nv.shared.<kernel>`` section spans besides the kernel's own variables where it also has a
#: ``.nv.shared.reserved.0`` section: the 1 KB sm_90 reserves per CTA (buildfacts.SM_LIMITS counts it apart).
_RESERVED_SMEM = 1024


def _attributes(cubin: bytes, offset: int, size: int) -> Iterator[tuple[int, bytes]]:
    end = offset + size
    while offset + 4 <= end:
        fmt, attr = cubin[offset], cubin[offset + 1]
        if fmt == _EIFMT_SVAL:
            length, = struct.unpack_from("<H", cubin, offset + 2)
            yield attr, cubin[offset + 4:offset + 4 + length]
            offset += 4 + length
        else:
            yield attr, cubin[offset + 2:offset + 4] if fmt in (_EIFMT_HVAL, _EIFMT_BVAL) else b""
            offset += 4


def kernel_facts(cubin: bytes, arch: str = "", threads: dict[str, int] | None = None) -> dict[str, KernelFacts]:
    """Each kernel of ``cubin`` (its entry functions, ``kernel`` symbols of a ``.text.<name>`` section) with its
    registers per thread, stack frame (local memory: spills live there) and static shared memory; ``threads``
    gives a kernel's block size where the builder knows it."""
    sections = _sections(cubin)
    symbols = _symbols(cubin, sections)
    names = [name for name, _, _ in symbols]
    kernels = {n[len(".text."):] for n, _, _ in sections if n.startswith(".text.")}
    found = {k: {"registers": 0, "stack_frame": 0} for k in kernels}
    for name, offset, size in sections:
        if name != ".nv.info":
            continue
        for attr, data in _attributes(cubin, offset, size):
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(data) >= 8:
                index, value = struct.unpack_from("<II", data)
                kernel = names[index] if index < len(names) else ""
                if kernel in found:
                    found[kernel]["registers" if attr == _EIATTR_REGCOUNT else "stack_frame"] = value
    reserved = _RESERVED_SMEM if any(n == ".nv.shared.reserved.0" for n, _, _ in sections) else 0
    smem = {n[len(".nv.shared."):]: max(0, size - reserved) for n, _, size in sections
            if n.startswith(".nv.shared.") and n != ".nv.shared.reserved.0"}
    return {k: KernelFacts(symbol=k, arch=arch, registers=v["registers"], stack_frame=v["stack_frame"],
                           smem_static=smem.get(k, 0), threads_per_block=(threads or {}).get(k, 0))
            for k, v in sorted(found.items())}
