"""The copy roofline: the bandwidth a plain device-to-device copy reaches, measured here.

A memory-bound kernel cannot beat a copy of the same bytes, so its GB/s over
the copy's GB/s says how much of the hardware it uses. The copy is measured
by the same harness, on the same device, rather than taken from a datasheet:
datasheet bandwidth is never reached, and a fraction of it flatters no one.
"""
from __future__ import annotations

import threading

import torch

__all__ = ["copy_roofline", "ROOFLINE_BYTES_CPU"]

#: Per-tensor size of the CPU copy: past the last-level cache of common server CPUs.
ROOFLINE_BYTES_CPU = 64 << 20
#: Per-tensor floor of the GPU copy; it is raised to 4x L2 where that is larger.
ROOFLINE_BYTES_GPU = 1 << 30

_lock = threading.Lock()
_cache: dict[str, float] = {}


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.copy_(src)


def copy_roofline(device: torch.device | str | None = None) -> float:
    """GB/s (bytes read plus written) of a large copy on ``device``; measured once per device per process."""
    from rapid_llm.bench.harness import bench, device_label, l2_bytes

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = str(device)
    with _lock:
        if key in _cache:
            return _cache[key]
        if device.type == "cuda":
            nbytes = max(ROOFLINE_BYTES_GPU, 4 * l2_bytes(device))
            repeats = 30
        else:
            nbytes = ROOFLINE_BYTES_CPU
            repeats = 5
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
        dst = torch.empty_like(src)
        result = bench(_copy, dst, src, bytes_moved=2 * nbytes, roofline=False, cold_l2=False,
                       warmup=3, repeats=repeats, label=f"copy roofline, {device_label(device)}")
        del src, dst
        _cache[key] = float(result.gbps)
        return _cache[key]
