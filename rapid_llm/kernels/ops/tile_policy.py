"""Arch facts that rows and launch heuristics ask about."""
from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(index)


def sm_version(device: Any = None) -> int:
    """The SM number of a CUDA device (90 on H100/H200); 0 when there is no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return 0
    device = torch.device("cuda") if device is None else torch.device(device)
    if device.type != "cuda":
        return 0
    major, minor = _capability(device.index if device.index is not None else torch.cuda.current_device())
    return major * 10 + minor
