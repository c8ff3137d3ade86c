"""What an op's check (its floor's ``check``, rapid_llm.kernels.ops.arguments) says about itself.

A check reads a call's metadata only, so a JIT row's call path remembers the calls it passed and does not ask it
again for a call like one of them (rapid_llm/kernels/dispatch/fastcall_checked.inc). A check that reads tensor
values on some devices (reshape_and_cache_flash's slots, on CPU) is marked here; its calls with a tensor on one
of those devices are checked every time. Kept below the ops and the toolchain: the ops mark, jit_row reads.
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["reads_values_on", "values_read_on"]

_ATTR = "reads_values_on"


def reads_values_on(check: Callable[..., Any], devices: tuple[str, ...]) -> Callable[..., Any]:
    """``check``, marked as reading tensor values on ``devices`` (torch's device types: "cpu", "cuda"). Returns it."""
    setattr(check, _ATTR, tuple(devices))
    return check


def values_read_on(check: Callable[..., Any] | None) -> tuple[str, ...]:
    """The device types ``check`` reads tensor values on; () for a check of metadata only (every unmarked one)."""
    return tuple(getattr(check, _ATTR, ()))
