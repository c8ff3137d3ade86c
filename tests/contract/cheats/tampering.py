"""Rows of op scale that tamper with the process they are timed in: the timer, the reference, the checker.

Each is ``scale_<cheat>(input, factor, out=None)``; the docstring names the cheat and what catches it. A row
changes the process once, on its first call; :func:`forget` undoes whatever the harness did not put back (it
restores the Python objects itself; the native patch is undone here).
"""
from __future__ import annotations

import ctypes
import time

import torch

import rapid_llm.bench.integrity as integrity


def _honest(input: torch.Tensor, factor: float, out: torch.Tensor | None) -> torch.Tensor:
    return torch.mul(input, factor, out=out) if out is not None else input * factor


def scale_patching_event_timer(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Python timer patch (the issue's case: 4x too fast, 363 % of the copy roofline): ``torch.cuda.Event.
    elapsed_time`` is replaced on the first call by one that reports a quarter. Caught by bench:
    ``timer_patched`` (the harness times with references of its own and puts the method back)."""
    event = torch.cuda.Event
    if not getattr(event.elapsed_time, "_cheat", False):
        real = event.elapsed_time

        def quarter(self, end_event):  # type: ignore[no-untyped-def]
            return real(self, end_event) / 4

        quarter._cheat = True  # type: ignore[attr-defined]
        event.elapsed_time = quarter
    return _honest(input, factor, out)


def scale_patching_perf_counter(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Host-clock patch: ``time.perf_counter`` and ``perf_counter_ns`` run at a quarter speed from the first call
    (what a CPU timer reads). Caught by bench: ``timer_patched``."""
    if not getattr(time.perf_counter_ns, "_cheat", False):
        real_ns, real = time.perf_counter_ns, time.perf_counter
        start_ns, start = real_ns(), real()

        def slow_ns() -> int:
            return start_ns + (real_ns() - start_ns) // 4

        def slow() -> float:
            return start + (real() - start) / 4

        slow_ns._cheat = slow._cheat = True  # type: ignore[attr-defined]
        time.perf_counter_ns, time.perf_counter = slow_ns, slow
    return _honest(input, factor, out)


def scale_patching_the_reference(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Tampering with the reference: skips the multiply (returns a copy of the input) and makes ``torch.mul``,
    which the op's floor calls, do the same, so the check compares one wrong answer with another. Caught by
    bench: ``checker_tampered`` (a name of torch rebound while the row ran)."""
    if not getattr(torch.mul, "_cheat", False):
        def copy_only(a, b=None, *, out=None):  # type: ignore[no-untyped-def]
            return a.clone() if out is None else out.copy_(a)

        copy_only._cheat = True  # type: ignore[attr-defined]
        _saved.setdefault("torch.mul", torch.mul)
        torch.mul = copy_only
    return input.clone() if out is None else out.copy_(input)


def scale_loosening_the_checker(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Tampering with the checker's state: sets the harness's agreement bound to infinity, then returns zeros.
    Caught by bench: ``checker_tampered``."""
    _saved.setdefault("AGREE", integrity.AGREE)
    integrity.AGREE = float("inf")
    return torch.zeros_like(input) if out is None else out.zero_()


# ------------------------------------------------------------------ native

_native: dict[str, object] = {}
_PROT_RWX, _PROT_RX, _PAGE = 7, 5, 4096


def _libcudart() -> ctypes.CDLL:
    from rapid_llm.bench.clock import _loaded_library

    path = _loaded_library("libcudart")
    if path is None:
        raise RuntimeError("no libcudart mapped in this process (torch links it statically): nothing to patch")
    return ctypes.CDLL(path)


def scale_patching_native_timer(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Native timer patch (x86-64, CUDA): the first bytes of ``cudaEventElapsedTime`` in the loaded CUDA runtime
    become a jump to a function that asks the driver and reports a quarter, so torch's ``Event.elapsed_time``
    and anything else calling the runtime read it. Caught by bench: ``timer_patched`` (the function's code
    changed; the harness reads intervals through its own handle on the driver)."""
    if "code" not in _native:
        cudart, cu = _libcudart(), ctypes.CDLL("libcuda.so.1")
        address = ctypes.cast(cudart.cudaEventElapsedTime, ctypes.c_void_p).value
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p)
        cu.cuEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]

        def quarter(ms, start, end):  # type: ignore[no-untyped-def]
            status = cu.cuEventElapsedTime(ms, start, end)
            ms[0] = ms[0] / 4
            return status

        hook = proto(quarter)
        target = ctypes.cast(hook, ctypes.c_void_p).value
        jump = b"\x48\xb8" + target.to_bytes(8, "little") + b"\xff\xe0"  # movabs rax, target; jmp rax
        _native.update(code=ctypes.string_at(address, len(jump)), address=address, hook=hook)
        _write_code(address, jump)
    return _honest(input, factor, out)


def _write_code(address: int, data: bytes) -> None:
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = address & ~(_PAGE - 1)
    if libc.mprotect(page, 2 * _PAGE, _PROT_RWX) != 0:
        raise RuntimeError("mprotect refused to make the runtime's code writable")
    ctypes.memmove(address, data, len(data))
    libc.mprotect(page, 2 * _PAGE, _PROT_RX)


_saved: dict[str, object] = {}


def forget() -> None:
    """Undo what these rows changed and the harness left: the native patch, and anything a test ran outside it."""
    if "code" in _native:
        _write_code(_native["address"], _native["code"])  # type: ignore[arg-type]
        _native.clear()
    if "torch.mul" in _saved:
        torch.mul = _saved.pop("torch.mul")  # type: ignore[assignment]
    if "AGREE" in _saved:
        integrity.AGREE = _saved.pop("AGREE")  # type: ignore[assignment]
    from rapid_llm.bench import clock

    clock.restore()
