"""Rows of op scale that cheat the way published reward hacks do, each caught by name (tests/contract/cheats/README.md).

Each is ``scale_<cheat>(input, factor, out=None)``, a plain-torch row that runs on CPU (and on CUDA
tensors where it says so); the docstring names the cheat and what catches it.
"""
from __future__ import annotations

import threading
import time

import torch


def scale_in_bf16(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Precision downgrade: the product is taken in bf16, half the bytes of fp32 to move, and widened back.
    Caught by verify: ``precision_loss`` (the wrong elements are within one bf16 rounding)."""
    result = (input.to(torch.bfloat16) * factor).to(input.dtype)
    return out.copy_(result) if out is not None else result


def scale_on_a_host_thread(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Host-thread deferral: returns at once and does the work on a thread, so a timer around the call
    measures only the return. Caught by verify: ``deferred_work`` (wrong as returned, right a moment later)."""
    out = torch.empty_like(input) if out is None else out

    def later() -> None:
        time.sleep(0.02)
        torch.mul(input, factor, out=out)

    threading.Thread(target=later, daemon=True).start()
    return out


_by_pointer: dict[tuple, torch.Tensor] = {}


def scale_memo_by_pointer(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Pointer memo: the first result for an input address is kept and returned for every later call there,
    whatever the content now. Caught by bench: ``timed_output_wrong`` (a timed call's result against an
    untimed call on the same content at new addresses)."""
    key = (input.data_ptr(), input.shape, float(factor))
    if key not in _by_pointer:
        _by_pointer[key] = input * factor
    result = _by_pointer[key]
    return out.copy_(result) if out is not None else result


_by_content: dict[tuple, torch.Tensor] = {}


def scale_memo_by_content(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Content memo: results kept by a fingerprint of the input (every 97th element), so repeated content
    costs a lookup instead of the work, which is made slow here (a few passes) to stand for real work.
    New content every call gains it nothing; bench names it: ``content_memo`` (seen content much faster)."""
    key = (input.shape, float(factor), tuple(input.reshape(-1)[::97].tolist()))
    if key not in _by_content:
        result = input.clone()
        for _ in range(20):
            result = result * 1.0
        _by_content[key] = result * factor
    result = _by_content[key]
    return out.copy_(result) if out is not None else result


_calls = [0]


def scale_after_warmup(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Warm-up detection: honest for its first 5 calls (a warm-up), then it returns
    an output without computing it. Caught by bench: ``timed_output_wrong``."""
    _calls[0] += 1
    out = torch.empty_like(input) if out is None else out
    if _calls[0] <= 5:
        torch.mul(input, factor, out=out)
    return out


_reference: dict[tuple, torch.Tensor] = {}


def scale_cached_reference(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """A cached reference result: the answer for the first input of a shape (what a checker computed once)
    is returned for every input of that shape. Caught by bench: ``timed_output_wrong``."""
    key = (input.shape, input.dtype, float(factor))
    if key not in _reference:
        _reference[key] = input * factor
    result = _reference[key]
    return out.copy_(result) if out is not None else result


def scale_with_persisting_l2(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Persisting-L2 window (llm.c PR 851's figure): the launcher sets aside an L2 carve-out and marks the
    input persisting on the current stream, so it stays in L2 through any flush. CUDA only. Caught by
    bench: ``persisting_l2`` (the carve-out is 0 while timing, and what the row set is read back)."""
    import ctypes

    from rapid_llm.bench import l2_persist

    cu = l2_persist.driver()
    stream = torch.cuda.current_stream(input.device).cuda_stream
    props = torch.cuda.get_device_properties(input.device)
    carve = int(getattr(props, "persisting_l2_cache_max_size", 0) or props.L2_cache_size // 2)
    cu.cuCtxSetLimit(l2_persist.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(carve))
    value = l2_persist.LaunchAttributeValue()
    window = value.accessPolicyWindow
    window.base_ptr = ctypes.c_void_p(input.data_ptr())
    window.num_bytes = min(input.numel() * input.element_size(), carve)
    window.hitRatio = 1.0
    window.hitProp = l2_persist.CU_ACCESS_PROPERTY_PERSISTING
    window.missProp = 1  # streaming
    cu.cuStreamSetAttribute(ctypes.c_void_p(stream), l2_persist.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                            ctypes.byref(value))
    return torch.mul(input, factor, out=out) if out is not None else input * factor


_overlapping: list = []


def scale_overlapping_launches(input: torch.Tensor, factor: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Back-to-back overlap from dependent launches counted as speed: dependent_overlap.cu's launcher starts each
    call as a programmatic dependent launch of its own (not rl::launch_dependent, so plain_launches() does not
    reach it) whose kernel never waits for the call before. Eager it costs what it costs; in the graph a
    ``graph_us`` figure replays, consecutive calls overlap. CUDA (sm_90 and newer), fp32. Caught by bench's graph
    timing: ``dependent_overlap`` (the graph's programmatic edges between calls)."""
    if not _overlapping:
        from pathlib import Path

        from rapid_llm.kernels.toolchain import jit

        source = Path(__file__).resolve().with_name("dependent_overlap.cu")
        _overlapping.append(jit.build_jit("dependent_overlap", source).module)
    out = torch.empty_like(input) if out is None else out
    _overlapping[0].scale_overlapping_launches(out, input, float(factor))
    return out


def forget() -> None:
    """Empty every memo. They are keyed by address, and an address freed by one test is handed to the next
    test's tensors: a stale entry would then hit where the test means the memo to miss."""
    for memo in (_by_pointer, _by_content, _reference):
        memo.clear()
