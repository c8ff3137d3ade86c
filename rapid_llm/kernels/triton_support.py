"""Toolchain probe for Triton rows. Never imports triton (that costs seconds)."""
from __future__ import annotations

import importlib.util
import os
from typing import Any

from rapid_llm.kernels.spec import Availability


def interpreting() -> bool:
    """True when Triton kernels run in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def available(device: Any = None) -> Availability:
    if importlib.util.find_spec("triton") is None:
        return Availability(False, "triton is not installed (pip install triton)")
    kind = getattr(device, "type", device) or "cuda"
    if kind == "cpu":
        if interpreting():
            return Availability(True)
        return Availability(False, "CPU tensors need TRITON_INTERPRET=1 (Triton's interpreter)")
    import torch

    if not torch.cuda.is_available():
        return Availability(False, "no CUDA device visible (torch.cuda.is_available() is False)")
    return Availability(True)
