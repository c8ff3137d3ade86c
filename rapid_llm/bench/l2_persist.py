"""The persisting-L2 carve-out, through the CUDA driver: capped before timing, read back after.

A kernel (or its launcher) can mark its data "persisting" with an access-policy window on the stream
(``cudaStreamAttributeAccessPolicyWindow``) once a carve-out is set aside
(``cudaLimitPersistingL2CacheSize``). Those lines survive any flush or rotation of other data, so a
memory-bound kernel is timed from L2: llm.c measured 3530 GB/s on an 864 GB/s card that way. The
harness sets the carve-out to 0 and resets persisting lines before it times anything (a window then
has nothing to persist into), and afterwards reads the carve-out and the timing stream's window back:
either one set means the row tried, and the figure is refused (rapid_llm.bench.integrity).

The driver (``libcuda.so.1``) is what torch's runtime sits on; its calls act on the current context,
which is torch's primary context once torch has touched the device. Without the driver (a CPU machine)
every function answers "unavailable" and nothing is capped.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

__all__ = ["L2State", "available", "cap", "state", "AccessPolicyWindow", "LaunchAttributeValue", "driver"]

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
CU_ACCESS_PROPERTY_PERSISTING = 2


class AccessPolicyWindow(ctypes.Structure):
    """CUaccessPolicyWindow."""

    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class LaunchAttributeValue(ctypes.Union):
    """CUlaunchAttributeValue (64 bytes): only its access-policy window is read here."""

    _fields_ = [("accessPolicyWindow", AccessPolicyWindow), ("pad", ctypes.c_char * 64)]


@dataclass(frozen=True)
class L2State:
    """What a row could have left behind: the carve-out in bytes, and the stream's persisting window."""

    carve_out_bytes: int
    window_bytes: int

    @property
    def persisting(self) -> bool:
        return self.carve_out_bytes > 0 or self.window_bytes > 0

    def describe(self) -> str:
        parts = []
        if self.carve_out_bytes:
            parts.append(f"a persisting-L2 carve-out of {self.carve_out_bytes} bytes")
        if self.window_bytes:
            parts.append(f"a persisting access-policy window of {self.window_bytes} bytes on the timing stream")
        return " and ".join(parts) or "no persisting L2"


@functools.lru_cache(maxsize=None)
def driver() -> Any | None:
    """The CUDA driver library, or None where there is none."""
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def available() -> bool:
    return driver() is not None


def cap(stream_handle: int) -> bool:
    """Carve-out 0, persisting lines reset, the stream's window cleared; False when the driver refused."""
    cu = driver()
    if cu is None:
        return False
    limit = ctypes.c_size_t(0)
    ok = cu.cuCtxGetLimit(ctypes.byref(limit), CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0
    if ok and limit.value:  # set only when it is not 0 already: the call is cheap then
        ok = cu.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(0)) == 0
    ok = cu.cuCtxResetPersistingL2Cache() == 0 and ok
    value = LaunchAttributeValue()  # all zero: no window (the legacy stream may refuse attributes: nothing to clear)
    cu.cuStreamSetAttribute(ctypes.c_void_p(stream_handle), CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                            ctypes.byref(value))
    return ok


def state(stream_handle: int) -> L2State | None:
    """The carve-out and the stream's persisting window now; None when the driver cannot say."""
    cu = driver()
    if cu is None:
        return None
    limit = ctypes.c_size_t(0)
    if cu.cuCtxGetLimit(ctypes.byref(limit), CU_LIMIT_PERSISTING_L2_CACHE_SIZE) != 0:
        return None
    value = LaunchAttributeValue()
    if cu.cuStreamGetAttribute(ctypes.c_void_p(stream_handle), CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                               ctypes.byref(value)) != 0:
        value = LaunchAttributeValue()  # a stream without attributes has no window
    window = value.accessPolicyWindow
    persisting = window.hitProp == CU_ACCESS_PROPERTY_PERSISTING and window.num_bytes > 0
    return L2State(int(limit.value), int(window.num_bytes) if persisting else 0)
