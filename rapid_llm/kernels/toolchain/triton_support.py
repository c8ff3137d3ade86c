"""Toolchain probe for Triton rows. Never imports triton (that costs seconds)."""
from __future__ import annotations

import importlib.util
import os
from typing import Any

from rapid_llm.kernels.registry.spec import Availability


_TRUE = ("1", "true", "yes", "on")
_serve: bool | None = None


def interpreting() -> bool:
    """True when Triton kernels run in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in _TRUE


def serve_interpreter(enabled: bool | None = True) -> None:
    """Let dispatch send calls on CPU tensors to Triton rows run by the interpreter (None: the environment's choice).

    The interpreter exists to check a kernel without a GPU, at a small fraction
    of torch's speed, so by default dispatch never picks it; ``verify`` and
    direct calls of a row still run it. Tests and notebooks that demonstrate a
    Triton row through dispatch on CPU ask for it here or with
    ``RAPID_LLM_SERVE_INTERPRETER=1``.
    """
    global _serve
    _serve = enabled
    from rapid_llm.kernels.registry import spec

    spec.touch()  # dispatch re-resolves


def serves_interpreter() -> bool:
    if _serve is not None:
        return _serve
    return os.environ.get("RAPID_LLM_SERVE_INTERPRETER", "0").lower() in _TRUE


INTERPRETER_REASON = ("Triton's CPU interpreter checks kernels, it does not serve calls "
                      "(rapid_llm.kernels.toolchain.triton_support.serve_interpreter() or RAPID_LLM_SERVE_INTERPRETER=1 to use it)")


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
