"""Compile-only check of a fast-path source for several GPU architectures, without a GPU.

Neither pass of the fast path needs a device: the host pass (the host C++
compiler) runs once, since host code is the same for every architecture;
the device pass (NVRTC, else ``nvcc -cubin``) runs once per architecture;
the link runs once, so a host function that is declared but never defined
fails here too. All of it happens in a throw-away directory and nothing is
loaded, which is what lets CPU-only CI catch a source that would not build
on an A100, an H100 or a B200. The passes are the builder's own
(:mod:`.builder`), so what this accepts is what a build accepts.
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Sequence

from rapid_llm.kernels.toolchain.fastpath import builder

__all__ = ["CompileReport", "check_fast_source"]


@dataclasses.dataclass(frozen=True)
class CompileReport:
    """What a compile check compiled: the kernels per architecture, how long it took, with which compiler."""

    source: Path
    kernels: dict[str, int]  # capability ("9.0") -> kernels compiled for it
    seconds: float
    device_compiler: str  # "NVRTC 13.0" or "nvcc"


def check_fast_source(source: Path, archs: Sequence[str], flags: Sequence[str] = ("-O3",),
                      device_compiler: str | None = None) -> CompileReport:
    """Run the host pass, the device pass for each of ``archs`` ("9.0"), and the link of ``source``.

    Raises the builder's BuildError at the first failure: its message names
    the pass and the architecture, its ``log`` is the compiler's own output,
    with the file:line of each error.
    """
    if not archs:
        raise ValueError("compile check: no GPU architecture to compile for")
    start = time.perf_counter()
    source = Path(source)
    kernels: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="rapid_llm_check_") as tmp:
        work = Path(tmp)
        host_obj, launched = builder.host_pass(source, work, flags)
        code = None
        for arch in archs:
            code = builder.device_pass(source, launched, arch, work, flags, device_compiler)
            kernels[arch] = len(launched)
        builder.link("compile_check", source, work, host_obj, code, launched)
    return CompileReport(source, kernels, time.perf_counter() - start, code.compiler)
