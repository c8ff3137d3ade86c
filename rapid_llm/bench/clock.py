"""The harness's clock, held where a row cannot reach it, and what tells that a row replaced the process's.

A row runs in the harness's process, so it can replace the functions a timer calls: ``torch.cuda.Event.
elapsed_time`` in Python, or the code of ``cudaEventElapsedTime`` itself (published reward hacks do both). The
harness therefore times only with references taken here, at import, before any row ran:

* host time: ``time.perf_counter`` / ``perf_counter_ns`` as they were at import;
* GPU time: CUDA events made from the Event class as it was, read by the driver's ``cuEventElapsedTime``
  through a library handle of the harness's own (``libcuda``), which torch never calls by that name, so
  replacing the runtime's entry point or the Python method does not reach it.

:func:`python_replaced` names each timer entry point whose object is not the one held here;
:func:`native_snapshot` keeps the address and first bytes of the runtime's and driver's timing functions, and
:func:`native_changed` names the ones whose code changed since. The harness refuses such a run
(``timer_patched``, rapid_llm.bench.tamper).
"""
from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import torch

__all__ = ["perf_counter", "perf_counter_ns", "new_event", "record", "synchronize", "elapsed_ms",
           "torch_elapsed_ms", "TIMER_ENTRIES", "python_replaced", "restore", "native_snapshot", "native_changed"]

perf_counter = time.perf_counter
perf_counter_ns = time.perf_counter_ns

_MISSING = object()
_EVENT = torch.cuda.Event
_EVENT_BASE = _EVENT.__mro__[1]  # torch._C._CudaEventBase: the C half every Event method ends in
_EVENT_RECORD = _EVENT.record
_EVENT_ELAPSED = _EVENT.elapsed_time
_SYNCHRONIZE = torch.cuda.synchronize


def _owners() -> dict[str, Any]:
    return {"time": time, "torch.cuda": torch.cuda, "torch._C": torch._C, "torch.cuda.Event": _EVENT,
            "torch._C._CudaEventBase": _EVENT_BASE}


#: The entry points a timer goes through: (owner, attribute). Each is held as it was at import.
TIMER_ENTRIES = (
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "monotonic"), ("time", "time"),
    ("torch.cuda", "Event"), ("torch.cuda", "synchronize"), ("torch.cuda", "current_stream"),
    ("torch._C", "_cuda_synchronize"),
    ("torch.cuda.Event", "record"), ("torch.cuda.Event", "elapsed_time"), ("torch.cuda.Event", "synchronize"),
    ("torch.cuda.Event", "query"), ("torch.cuda.Event", "__init__"), ("torch.cuda.Event", "__new__"),
    ("torch._C._CudaEventBase", "record"), ("torch._C._CudaEventBase", "elapsed_time"),
    ("torch._C._CudaEventBase", "synchronize"), ("torch._C._CudaEventBase", "query"),
)


def _raw(owner: Any, attr: str) -> Any:
    """The object stored under ``attr`` on ``owner`` itself (a class's own dict, a module's), not inherited."""
    return vars(owner).get(attr, _MISSING)


_HELD = {(o, a): _raw(_owners()[o], a) for o, a in TIMER_ENTRIES}


def python_replaced() -> list[str]:
    """The timer entry points whose object is not the one held at import (``torch.cuda.Event.elapsed_time``)."""
    owners = _owners()
    return [f"{o}.{a}" for (o, a), held in _HELD.items() if _raw(owners[o], a) is not held]


def restore() -> None:
    """Put back every timer entry point as it was at import, so later timers in this process are not fooled."""
    owners = _owners()
    for (o, a), held in _HELD.items():
        if _raw(owners[o], a) is held:
            continue
        if held is _MISSING:
            delattr(owners[o], a)
        else:
            setattr(owners[o], a, held)


# ------------------------------------------------------------------ GPU time


def new_event() -> torch.cuda.Event:
    """A timing event of the Event class as it was at import."""
    return _EVENT(enable_timing=True)


def record(event: torch.cuda.Event) -> None:
    _EVENT_RECORD(event)


def synchronize() -> None:
    _SYNCHRONIZE()


def _driver() -> Any | None:
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        cu.cuEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
        cu.cuEventSynchronize.argtypes = [ctypes.c_void_p]
        return cu
    except (OSError, AttributeError):
        return None


_cu: list[Any] = []


def _handle(event: torch.cuda.Event) -> int | None:
    getter = vars(_EVENT_BASE).get("cuda_event")
    try:
        return int(getter.__get__(event)) if getter is not None else None
    except (TypeError, ValueError, RuntimeError):
        return None


def elapsed_ms(start: torch.cuda.Event, end: torch.cuda.Event) -> float:
    """Milliseconds between two recorded events, read by the driver's ``cuEventElapsedTime`` (the harness's own
    handle on libcuda); where that cannot be had, by the C method torch's Event had at import."""
    if not _cu:
        _cu.append(_driver())
    cu, a, b = _cu[0], _handle(start), _handle(end)
    if cu is not None and a and b:
        ms = ctypes.c_float()
        if cu.cuEventSynchronize(b) == 0 and cu.cuEventElapsedTime(ctypes.byref(ms), a, b) == 0:
            return float(ms.value)
    return float(_EVENT_ELAPSED(start, end))


def torch_elapsed_ms(start: torch.cuda.Event, end: torch.cuda.Event) -> float:
    """The same interval through torch's own path as it is now (``Event.elapsed_time`` -> the CUDA runtime): what
    a timer that trusted the process would read. A difference from :func:`elapsed_ms` means the path was patched
    below Python (the runtime's code, or torch's table of it)."""
    return float(_EVENT_ELAPSED(start, end))


# ------------------------------------------------------------------ native code

#: Functions a GPU timer reaches, by library: the runtime torch calls, and the driver.
NATIVE_SYMBOLS = {
    "libcudart": ("cudaEventElapsedTime", "cudaEventRecord", "cudaEventSynchronize", "cudaDeviceSynchronize",
                  "cudaStreamSynchronize", "cudaEventQuery"),
    "libcuda": ("cuEventElapsedTime", "cuEventElapsedTime_v2", "cuEventRecord", "cuEventSynchronize",
                   "cuCtxSynchronize", "cuStreamSynchronize"),
}
#: Bytes of each function's code compared: room for any jump that could send it elsewhere.
CODE_BYTES = 16


def _loaded_library(stem: str) -> str | None:
    """The path of the first library mapped into this process whose file is ``<stem>.so...``."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if os.path.basename(path).startswith(stem + ".so"):
                    return path
    except OSError:
        return None
    return None


def native_snapshot() -> dict[str, tuple[int, bytes]]:
    """``library:symbol`` -> (address, first CODE_BYTES bytes of its code), for each timing function loaded here
    (empty without CUDA libraries)."""
    out: dict[str, tuple[int, bytes]] = {}
    for stem, symbols in NATIVE_SYMBOLS.items():
        path = _loaded_library(stem)
        if path is None:
            continue
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        for symbol in symbols:
            try:
                address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
            except AttributeError:
                continue
            if address:
                out[f"{stem}:{symbol}"] = (address, ctypes.string_at(address, CODE_BYTES))
    return out


def native_changed(before: dict[str, tuple[int, bytes]]) -> list[str]:
    """The functions of ``before`` whose address or code is not what it was then."""
    now = native_snapshot()
    return [name for name, was in before.items() if now.get(name) != was]
