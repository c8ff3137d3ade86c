"""How to call an op for timing: arguments of a given size and the bytes they move.

A row's function is called directly with these arguments (never through
dispatch), so every row of an op is timed on identical inputs. Register a
case for a new op with :func:`register_case`; the shipped ops' cases are here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

__all__ = ["CaseArgs", "register_case", "unregister_case", "get_case", "make_args"]


@dataclass
class CaseArgs:
    """Positional and keyword arguments for one call, and the work it does."""

    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)
    bytes_moved: int | None = None
    flops: int | None = None


MakeCase = Callable[[int, torch.dtype, torch.device], CaseArgs]
_CASES: dict[str, MakeCase] = {}


def register_case(op: str, make: MakeCase, *, replace: bool = False) -> None:
    """Teach bench_op how to build ``op``'s arguments for ``numel`` elements of ``dtype`` on ``device``."""
    if op in _CASES and not replace:
        raise ValueError(f"op {op!r} already has a benchmark case; pass replace=True to swap it")
    _CASES[op] = make


def unregister_case(op: str) -> None:
    if _CASES.pop(op, None) is None:
        raise ValueError(f"op {op!r} has no benchmark case to remove")


def get_case(op: str) -> MakeCase:
    try:
        return _CASES[op]
    except KeyError:
        raise ValueError(
            f"op {op!r} has no benchmark case; register one with rapid_llm.bench.register_case "
            f"(known: {', '.join(sorted(_CASES)) or 'none'})"
        ) from None


def make_args(op: str, numel: int, dtype: torch.dtype, device: torch.device | str) -> CaseArgs:
    if numel < 1:
        raise ValueError(f"{op}: benchmark sizes must be >= 1 element, got {numel}")
    return get_case(op)(int(numel), dtype, torch.device(device))


#: Not a power of two, so every row really multiplies (a power of two could be folded into the exponent).
SCALE_FACTOR = 1.7


def _scale_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    x = torch.empty(numel, dtype=dtype, device=device).uniform_(-4, 4)
    out = torch.empty_like(x)
    return CaseArgs((x, SCALE_FACTOR), {"out": out}, bytes_moved=2 * numel * x.element_size())


register_case("scale", _scale_case)
