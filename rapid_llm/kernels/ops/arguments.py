"""The argument checks every op's ``check`` is made of: one sentence per problem, naming the op and the argument.

Each op states its checks once, as ``check`` beside its native floor (the floor's function carries it as
``<floor>.check``); the floor and the Triton rows run it before anything is written, and dispatch and
``torch.ops.rapid_llm.<op>`` run it where a call fails or bypasses the rows, so a bad call gets one answer
whichever path it takes. Not an op group (a plain module beside the groups, which the registry does not
import as one).

A check reads a call's metadata only: the type and value of each non-tensor argument, and each tensor's type,
dtype, device, shape, strides, alignment (to 64 bytes) and where it lies relative to the others
(:func:`no_overlap`), never a tensor's values. So a JIT row's call path remembers the calls its op's check passed
and does not ask again for a call that matches one of them in all of that
(rapid_llm/kernels/dispatch/fastcall_checked.inc), so a good call pays for its checks about once per shape
(benchmarks/kernels/bench_row_checks.py). A check that reads values on some devices says where (``reads_values_on``,
rapid_llm.kernels.registry.check_marks); its calls with a tensor there are checked every time.

Written tensors must not share memory with any other argument (an in-place rotation of ``q`` passed as
``k`` too would rotate it twice): :func:`no_overlap` compares byte ranges first, then the rows of
row-strided views (``q`` and ``k`` as column slices of one qkv buffer share no element and pass).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import torch

from rapid_llm.kernels.platform import describe
from rapid_llm.kernels.registry.check_marks import reads_values_on  # noqa: F401 - the ops mark their checks here

#: The dtypes the shipped ops compute in, by how messages name them.
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
#: Tensors up to this many elements are compared element by element where their byte ranges interleave.
_EXACT_LIMIT = 1 << 20


def type_name(value: Any) -> str:
    return "a tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def dtype_text(dtype: torch.dtype) -> str:
    return _SHORT.get(dtype, str(dtype).replace("torch.", ""))


def tensor(op: str, name: str, value: Any) -> torch.Tensor:
    """``value`` if it is a tensor; TypeError naming the op and the argument otherwise."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a tensor, got {type_name(value)}")
    return value


def optional_tensor(op: str, name: str, value: Any) -> torch.Tensor | None:
    if value is not None and not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a tensor or None, got {type_name(value)}")
    return value


def dtype_in(op: str, name: str, t: torch.Tensor, dtypes: Iterable[torch.dtype]) -> None:
    """ValueError unless ``t``'s dtype is one the op declares (a floor never computes in another)."""
    dtypes = tuple(dtypes)
    if t.dtype not in dtypes:
        allowed = ", ".join(dtype_text(d) for d in dtypes)
        raise ValueError(f"{op}: {name} must be {allowed}, got {dtype_text(t.dtype)}")


def real(op: str, name: str, value: Any, *, at_least: float | None = None, finite: bool = False) -> float:
    """A Python int or float (not a bool, a string or a tensor), ``>= at_least`` and finite where asked."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{op}: {name} must be a float, got {type_name(value)}")
    if (finite or at_least is not None) and not math.isfinite(value):
        raise ValueError(f"{op}: {name} must be finite, got {value!r}")
    if at_least is not None and value < at_least:
        raise ValueError(f"{op}: {name} must be >= {at_least:g}, got {value!r}")
    return value


def integer(op: str, name: str, value: Any, *, at_least: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{op}: {name} must be an int, got {type_name(value)}")
    if at_least is not None and value < at_least:
        raise ValueError(f"{op}: {name} must be >= {at_least}, got {value}")
    return value


def boolean(op: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool, got {type_name(value)}")
    return value


def one_device(op: str, **tensors: torch.Tensor) -> None:
    """ValueError unless every tensor is on one device (meta included: a fake call is all fake)."""
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        got = ", ".join(f"{name} on {t.device}" for name, t in tensors.items())
        raise ValueError(f"{op}: all tensors must be on one device, got {got}")


def no_overlap(op: str, written: dict[str, torch.Tensor], others: dict[str, torch.Tensor | None],
               allow_same: tuple[tuple[str, str], ...] = ()) -> None:
    """ValueError if a written tensor overlaps itself, another written tensor or any other argument.

    ``allow_same``: (written, other) pairs that may be the very same view (``scale(x, f, out=x)``, an
    elementwise op reading each element before writing it); a partial overlap is refused even there.
    Skipped while torch.compile traces: its tensors are fakes with no memory to compare, and the eager
    call (or the custom op's check) sees the real ones. A good call costs one byte range per tensor and a
    comparison per pair, nothing more (a CUDA row's call path asks once per kind of call: the module docstring).
    """
    if torch.compiler.is_compiling():
        return
    extents = {name: _extent(t) for name, t in (*written.items(), *others.items()) if t is not None}
    names = list(written)
    for i, name in enumerate(names):
        t = written[name]
        if not t.is_contiguous() and t.numel() > 1 and not t.is_meta and torch._debug_has_internal_overlap(t) == 1:
            raise ValueError(f"{op}: {name} is written, but several of its elements share memory "
                             f"(an expanded view {describe(t)})")
        here = extents[name]
        if here is None:
            continue
        for other_name in [*names[i + 1:], *others]:
            there = extents.get(other_name)
            if there is None or here[1] <= there[0] or there[1] <= here[0]:
                continue  # disjoint byte ranges: the common case, decided without looking further
            other = written.get(other_name, others.get(other_name))
            if not _meet(t, other, here, there):
                continue
            if (name, other_name) in allow_same and _same_view(t, other):
                continue
            raise ValueError(f"{op}: {name} is written and must not share memory with {other_name}")


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype)


def _extent(t: torch.Tensor) -> tuple[int, int] | None:
    """The byte range [start, end) t's elements lie in; None for no memory (empty, meta, fake)."""
    if t.is_meta:
        return None
    try:
        start = t.data_ptr()
    except RuntimeError:  # a fake tensor under torch.compile has no memory to compare
        return None
    if start == 0:  # nor has one under opcheck's fake mode, nor an empty one (a tensor with elements never sits at 0)
        return None
    if t.is_contiguous():
        size = t.nbytes
        return (start, start + size) if size else None
    span = 0
    for n, s in zip(t.shape, t.stride()):
        if n == 0:
            return None
        span += (n - 1) * s
    return start, start + (span + 1) * t.element_size()


def overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a and b share a byte of memory (exact for dense tensors and row-strided views)."""
    ea, eb = _extent(a), _extent(b)
    if ea is None or eb is None or ea[1] <= eb[0] or eb[1] <= ea[0]:
        return False
    return _meet(a, b, ea, eb)


def _meet(a: torch.Tensor, b: torch.Tensor, ea: tuple[int, int], eb: tuple[int, int]) -> bool:
    """overlap() for two tensors whose byte ranges ``ea`` and ``eb`` intersect."""
    ra, rb = _rows(a), _rows(b)
    if ra is not None and rb is not None:
        verdict = _rows_overlap(ea[0], ra, eb[0], rb)
        if verdict is not None:
            return verdict
    if a.numel() <= _EXACT_LIMIT and b.numel() <= _EXACT_LIMIT:
        return bool(torch.isin(_bytes(a), _bytes(b)).any())
    return True  # interleaved views too large to compare: refused rather than risked


def _rows(t: torch.Tensor) -> tuple[int, int, int] | None:
    """t as ``count`` runs of ``width`` bytes every ``period`` bytes, or None where it is not one."""
    dims = [(n, s) for n, s in zip(t.shape, t.stride()) if n != 1]
    width = 1
    while dims and dims[-1][1] == width:
        width *= dims.pop()[0]
    size = t.element_size()
    if not dims:
        return width * size, width * size, 1
    count, period = dims[-1]
    for n, s in reversed(dims[:-1]):
        if s != period * count:
            return None
        count *= n
    if period < width:
        return None
    return width * size, period * size, count


def _rows_overlap(a: int, ra: tuple[int, int, int], b: int, rb: tuple[int, int, int]) -> bool | None:
    (wa, pa, ca), (wb, pb, cb) = ra, rb
    if ca == 1:
        pa = pb
    if cb == 1:
        pb = pa
    if pa != pb:
        return None
    # run r of a and run s of b meet iff -wb < (b - a) + (s - r) * p < wa, for some s - r in [-(ca-1), cb-1]
    d, p = b - a, pa
    lo = max(-(ca - 1), (-wb - d) // p + 1)
    hi = min(cb - 1, -((d - wa) // p) - 1)
    return lo <= hi


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The addresses of every byte of t's elements (small tensors only)."""
    offsets = torch.zeros((), dtype=torch.int64)
    for n, s in zip(t.shape, t.stride()):
        offsets = offsets.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * s
    size = t.element_size()
    starts = t.data_ptr() + offsets.flatten() * size
    return (starts.unsqueeze(-1) + torch.arange(size, dtype=torch.int64)).flatten()


def runs_on(op: str, row: str, devices: tuple[str, ...], *tensors: torch.Tensor) -> None:
    """ValueError for a tensor on a device the row does not run on (a meta tensor reaching a kernel)."""
    for t in tensors:
        if t.device.type not in devices:
            raise ValueError(f"{op}: the {row} row runs on {' and '.join(devices)} tensors, got {t.device.type}")
