"""The CUDA driver's own occupancy answer for a kernel in a cubin (cuOccupancyMaxActiveBlocksPerMultiprocessor).

rapid_llm.kernels.toolchain.buildfacts computes occupancy from the architecture's
tables, which works on a machine without a GPU; where a GPU is here, the
driver is asked as well, so a table that is wrong for a new chip shows up as
a disagreement instead of a wrong figure. Plain ctypes on libcuda: no torch,
and the device's primary context (the one torch uses) is retained, never
created anew.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

__all__ = ["available", "ask", "DriverAnswer"]

#: CUfunction_attribute: the most threads a block of this function may have (registers and __launch_bounds__).
_MAX_THREADS_PER_BLOCK = 0


@dataclass(frozen=True)
class DriverAnswer:
    """What the CUDA driver says of one kernel at one launch shape."""

    blocks_per_sm: int
    max_threads_per_block: int


@functools.cache
def _driver() -> Any | None:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    count = ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None
    return lib


def available() -> bool:
    """A CUDA driver with at least one device is here."""
    return _driver() is not None


def _current_device() -> int:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


def ask(cubin: bytes, symbol: str, threads_per_block: int, dynamic_smem: int = 0) -> DriverAnswer | None:
    """Resident blocks per SM of ``symbol`` in ``cubin`` at that launch shape, and its largest block, or None
    where the driver cannot be asked (no driver, a cubin for another architecture, a symbol not in it)."""
    lib = _driver()
    if lib is None:
        return None
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    if lib.cuDeviceGet(ctypes.byref(device), _current_device()) != 0:
        return None
    if lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) != 0:
        return None
    try:
        if lib.cuCtxPushCurrent_v2(ctx) != 0:
            return None
        module, function, blocks, most = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
        try:
            if lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin)) != 0:
                return None
            try:
                ok = (lib.cuModuleGetFunction(ctypes.byref(function), module, symbol.encode()) == 0 and
                      lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                          ctypes.byref(blocks), function, ctypes.c_int(threads_per_block),
                          ctypes.c_size_t(dynamic_smem)) == 0 and
                      lib.cuFuncGetAttribute(ctypes.byref(most), _MAX_THREADS_PER_BLOCK, function) == 0)
                return DriverAnswer(blocks.value, most.value) if ok else None
            finally:
                lib.cuModuleUnload(module)
        finally:
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(device)
