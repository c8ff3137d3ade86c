"""The ways a wrong kernel passes a plain comparison, and the check that stops each one.

``verify`` (rapid_llm.kernels.verification.golden) runs every reference case through these:

- **guard bands**: every output, and every tensor a row is handed to change
  in place, lives inside a larger buffer whose bytes around it (and in the
  gaps of a strided view) hold a canary pattern; any changed byte outside the
  tensor's own elements is a write out of bounds, reported with its offset;
- **poison**: outputs start as all-ones bytes (NaN in every float type), and
  the allocator's free blocks are filled with it before a row runs, so a
  result that is never written, or a fresh allocation the row returns
  unwritten, holds the pattern and is named ``unwritten``;
- **inputs unchanged**: arguments are compared bit for bit after the call
  (an in-place op's reference calls the row on copies, which it compares
  against the oracle instead);
- **another stream** (CUDA): the call runs on a non-default current stream
  whose inputs are produced behind a delay, and the result is read after
  synchronising that stream only; a row whose work runs elsewhere reads its
  inputs early or is read before it finishes;
- **out-of-bounds reads**: every tensor argument sits inside read bands (so a
  read just past it finds memory that exists: a wrong value, not a fault);
  when a case comes out wrong, each tensor argument
  is placed inside a buffer whose bytes before it, then after it, are filled
  two ways; a result that changes with them was computed from memory outside
  that argument, and is named ``out_of_bounds_read`` (which argument, which
  side) instead of being left as a value mismatch;
- **deferred work**: a result that is wrong as the call returns is read again
  once the device is idle and a moment has passed; right then, the row
  finishes after returning (``deferred_work``: a host thread, or a stream the
  caller does not wait on), which also lets a benchmark time nothing;
- **precision loss**: when a case comes out wrong (past the rule's stated
  bound) and its wrong elements carry a narrower float type's rounding (bf16
  or fp16 for an fp32 result: nearly all within one rounding of it, and as far
  off as such a rounding is, not a few fp32 ulps), the row computed in that
  type: ``precision_loss`` names the type and the elements, instead of a plain
  value mismatch;
- **flush to zero**: when a case comes out wrong and its wrong elements came
  back exactly 0 where the exact value is not, from inputs holding subnormal
  fp32 values, the row flushes subnormals (FTZ: ``--use_fast_math``,
  ``-ftz=true``, a ``.ftz`` instruction): ``flush_to_zero`` names the
  elements and the rule they broke;
- **several seeds**: a row whose output does not change when its input does
  is ``input_independent``; run twice on one input it is (or is not)
  deterministic, which is reported as a property.

Reference ``call`` functions make their buffers with :func:`output_like` and
:func:`copy_for_row`, which are plain allocations outside ``verify``.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from rapid_llm.kernels.platform import dtype_name

__all__ = ["DEFECT_KINDS", "Defect", "output_like", "copy_for_row", "guarded", "poison_free_memory",
           "changed_arguments", "unwritten_count", "same_bits", "snapshot", "POISON_BYTE", "CANARY_BYTE",
           "inside_bands", "out_of_bounds_reads", "precision_loss", "flush_to_zero", "read_later", "DEFERRED_WAIT_S"]

#: What each kind of defect means; a Defect's ``kind`` is one of these keys.
DEFECT_KINDS = {
    "mutated_input": "an input argument changed (the op does not declare mutating it)",
    "input_independent": "the output did not change when the input did",
    "unwritten": "output elements still hold the poison pattern: they were never written",
    "guard_band": "bytes changed next to an output: a write out of bounds",
    "out_of_bounds_read": "the result changes with the bytes next to an input: a read out of bounds",
    "precision_loss": "the wrong elements are right to a lower precision's rounding: computed in a narrower type",
    "flush_to_zero": "wrong elements came back 0 from subnormal inputs: the row flushes subnormals (FTZ)",
    "deferred_work": "the result was written after the call returned (a host thread, or a stream nobody waits on)",
    "other_stream": "the work was not ordered on the current stream",
    "nondeterministic": "two runs on one input differ (a failure only for a row that declares itself deterministic)",
    "wrote_outside_slots": "a scatter changed a slot its mapping does not name (verification.scatter_mode)",
    "wrote_padding": "a scatter wrote a padded token's row (slot -1) into the tensor (verification.scatter_mode)",
    "tie_broken_differently": "a router's ids differ only among exactly tied scores: its tie rule is not the op's "
                              "(verification.routing_mode)",
    "wrong_experts": "a router chose experts whose scores are not the oracle's (verification.routing_mode)",
    "not_renormalised": "a router's weights do not sum to 1 where it was asked to renormalise (verification.routing_mode)",
    "sampled_outside_set": "a sampler drew a token outside the row's top-k / nucleus set, or no token id "
                           "(verification.sampling_mode)",
    "wrong_distribution": "a sampler's draws fail the chi-square against the exact distribution, and fit no named "
                          "defect's (verification.sampling_mode)",
    "nucleus_off_by_one": "a sampler's draws fit the nucleus cut one token early (the running sum taken with the token "
                          "itself) (verification.sampling_mode)",
    "p_before_k": "a sampler's draws fit top-p applied to the whole distribution before top-k "
                  "(verification.sampling_mode)",
    "temperature_ignored": "a sampler's draws fit the logits at temperature 1 (verification.sampling_mode)",
}
POISON_BYTE = 0xFF  # all-ones: NaN in fp16, bf16, fp32 and fp64
CANARY_BYTE = 0xA5  # a finite, odd-looking value in every float type
GUARD_BYTES = 256   # a multiple of 16: the tensor keeps its alignment inside the guarded buffer

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class Defect:
    """One defect found by ``verify``: its kind (a DEFECT_KINDS key), where, and what was seen."""

    kind: str
    dtype: str
    case: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message} ({self.dtype}, case {self.case})"


# ------------------------------------------------------------------ guarded buffers


@dataclass
class _Guarded:
    name: str
    tensor: torch.Tensor
    base: torch.Tensor  # uint8, the whole buffer


_active: contextvars.ContextVar[list[_Guarded] | None] = contextvars.ContextVar("rapid_llm_guards", default=None)


@contextlib.contextmanager
def guarded() -> Iterator[list[_Guarded]]:
    """While active, output_like / copy_for_row place their tensors inside canary guard bands.

    ``RAPID_LLM_GUARD_BANDS=0`` turns them off: under compute-sanitizer every tensor must be its own
    allocation, or a write past its end lands in the band and memcheck cannot see it.
    """
    if os.environ.get("RAPID_LLM_GUARD_BANDS") == "0":
        yield []
        return
    token = _active.set([])
    try:
        yield _active.get()
    finally:
        _active.reset(token)


def _span(shape: Sequence[int], stride: Sequence[int]) -> int:
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride))


def _typed_bits(byte: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.full((dtype.itemsize,), byte, dtype=torch.uint8, device=device).view(dtype)


def _layout_like(shape: Sequence[int], stride: Sequence[int], misalign: int, dtype: torch.dtype,
                 device: torch.device, name: str) -> torch.Tensor:
    """An uninitialised tensor of this layout; inside guard bands when guarded() is active."""
    guards = _active.get()
    if guards is None:
        buf = torch.empty(misalign + _span(shape, stride), dtype=dtype, device=device)
        return buf.as_strided(tuple(shape), tuple(stride), misalign)
    pad = GUARD_BYTES // dtype.itemsize
    base = torch.full(((2 * pad + misalign + _span(shape, stride)) * dtype.itemsize,), CANARY_BYTE,
                      dtype=torch.uint8, device=device)
    t = base.view(dtype).as_strided(tuple(shape), tuple(stride), pad + misalign)
    guards.append(_Guarded(name, t, base))
    return t


def output_like(x: torch.Tensor, shape: Sequence[int] | None = None, name: str = "out") -> torch.Tensor:
    """A contiguous output of ``x``'s dtype and device (shape ``shape`` or ``x``'s), poisoned: never written, it shows."""
    shape = tuple(x.shape if shape is None else shape)
    stride = torch.empty(shape, device="meta").stride()
    t = _layout_like(shape, stride, 0, x.dtype, x.device, name)
    t.view(_INT_OF_SIZE[x.element_size()]).fill_(-1 if x.element_size() > 1 else POISON_BYTE)
    return t


def copy_for_row(t: torch.Tensor, name: str = "argument") -> torch.Tensor:
    """A copy of ``t`` with its strides and its misalignment to 16 bytes, for a row to change in place."""
    misalign = (t.storage_offset() * t.element_size() % 16) // t.element_size()
    out = _layout_like(t.shape, t.stride(), misalign, t.dtype, t.device, name)
    out.copy_(t)
    return out


#: Two fills of the bytes around an input: finite, and different values in every float type (1.06 / 3.13 in fp16,
#: 0.0115 / 48.5 in bf16 and fp32).
READ_BAND_BYTES = (0x3C, 0x42)


def inside_bands(t: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """A copy of ``t`` (same strides and misalignment) whose buffer holds ``before`` bytes up to its first element
    (and in its gaps) and ``after`` bytes past its last."""
    misalign = (t.storage_offset() * t.element_size() % 16) // t.element_size()
    pad = GUARD_BYTES // t.element_size()
    span = _span(t.shape, t.stride())
    base = torch.full(((2 * pad + misalign + span) * t.element_size(),), before, dtype=torch.uint8, device=t.device)
    base[(pad + misalign + span) * t.element_size():] = after
    out = base.view(t.dtype).as_strided(tuple(t.shape), tuple(t.stride()), pad + misalign)
    out.copy_(t)
    return out


def _flat_results(result: Any) -> list[torch.Tensor]:
    parts = result if isinstance(result, (tuple, list)) else (result,)
    return [p.detach().clone() for p in parts if isinstance(p, torch.Tensor)]


def _same_results(x: list[torch.Tensor], y: list[torch.Tensor]) -> bool:
    return len(x) == len(y) and all(same_bits(p, q) for p, q in zip(x, y))


def out_of_bounds_reads(run: Any, args: Sequence[Any]) -> list[str]:
    """Which tensor arguments ``run(*args)`` reads outside of, and on which side (a message each); [] when the
    result does not depend on their surroundings, or when two identical runs already differ (no verdict)."""
    found = []
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor) or a.numel() == 0 or a.dtype not in _FLOAT_OR_INT:
            continue
        sides = []
        for side in ("before", "after"):
            outs = []
            for byte in (READ_BAND_BYTES[0], READ_BAND_BYTES[0], READ_BAND_BYTES[1]):
                banded = inside_bands(a, byte if side == "before" else READ_BAND_BYTES[0],
                                      byte if side == "after" else READ_BAND_BYTES[0])
                outs.append(_flat_results(run(*args[:i], banded, *args[i + 1:])))
            if not _same_results(outs[0], outs[1]):
                return []  # two identical runs differ: the row is not deterministic, and nothing can be said
            if not _same_results(outs[0], outs[2]):
                sides.append(side)
        if sides:
            found.append(f"the result changes with the bytes {' and '.join(sides)} argument {i + 1} "
                         f"{tuple(a.shape)}: it reads outside that tensor")
    return found


_FLOAT_OR_INT = {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
                 torch.int16, torch.int8, torch.uint8}


#: How long a wrong result is left before it is read again (deferred_work): far longer than any host thread or
#: stream needs to finish a reference case.
DEFERRED_WAIT_S = 0.2


def read_later(got: Any, device: torch.device) -> torch.Tensor | None:
    """``got`` (a tensor result) read again after every stream of ``device`` is idle and DEFERRED_WAIT_S passed."""
    if not isinstance(got, torch.Tensor):
        return None
    time.sleep(DEFERRED_WAIT_S)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return got.clone()


#: The share of a case's wrong elements that must fit a narrower type's rounding for the case to be named so.
PRECISION_SHARE = 0.95
#: How large the wrong elements' median error must be, in a narrower type's eps of |exact|, to be that type's
#: rounding: a rounding to it is uniform over half an ulp (a median near 1/4 eps), while fp32 math sits at
#: 2^-16 (bf16) or 2^-13 (fp16) of that per fp32 ulp, so a few hundred fp32 ulps stay far below.
PRECISION_MEDIAN = 1 / 16


def precision_loss(got: torch.Tensor, exact: torch.Tensor, bad: torch.Tensor, dtype: torch.dtype) -> str | None:
    """A message when the wrong elements (``bad``: outside the rule, so past its stated bound) of a ``dtype``
    result carry a narrower float type's rounding (bf16, then fp16): nearly all within one rounding of it of the
    exact value, and their median error as large as such a rounding is; None otherwise (a few fp32 ulps
    are no narrower type's rounding)."""
    n_bad = int(bad.sum())
    if n_bad == 0 or not dtype.is_floating_point:
        return None
    mask = bad.reshape(-1).to(got.device)
    g = got.reshape(-1).to(torch.float64)[mask]
    e = exact.reshape(-1).to(g.device)[mask.to(g.device)]
    err = (g - e).abs()
    for narrow in (torch.bfloat16, torch.float16):
        info = torch.finfo(narrow)
        if info.eps <= torch.finfo(dtype).eps:
            continue
        one_rounding = info.eps * e.abs() + info.tiny
        fits = err <= one_rounding
        sized = float((err / one_rounding).nan_to_num(nan=0.0).median()) >= PRECISION_MEDIAN
        if sized and int(fits.sum()) >= PRECISION_SHARE * n_bad:
            name = dtype_name(narrow)
            where = mask.nonzero().reshape(-1)[:3].tolist()
            sample = ", ".join(f"[{i}] = {float(got.reshape(-1)[i]):.9g} for {float(exact.reshape(-1)[i]):.9g}"
                               for i in where)
            return (f"{int(fits.sum())} of the {n_bad} wrong elements are within one {name} rounding of the exact "
                    f"value and as far off as one (e.g. {sample}): the result was computed (or stored on the way) "
                    f"in {name}, not {dtype_name(dtype)}, and so outside the rule for {dtype_name(dtype)}")
    return None


def _subnormal_fp32(args: Sequence[Any]) -> int:
    """How many values of the floating tensor arguments are subnormal once widened to fp32 (what a kernel
    computing in fp32 sees, and what FTZ flushes)."""
    tiny = torch.finfo(torch.float32).tiny
    count = 0
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64 and a.numel():
            v = a.detach().float().abs()
            count += int(((v > 0) & (v < tiny)).sum())
    return count


def flush_to_zero(got: torch.Tensor, exact: torch.Tensor, bad: torch.Tensor, args: Sequence[Any]) -> str | None:
    """A message when nearly all wrong elements (``bad``, a mask) came back exactly 0 where the exact value is a
    nonzero number, and the case's inputs hold subnormal fp32 values: the row flushed them; None otherwise."""
    n_bad = int(bad.sum())
    subnormal = _subnormal_fp32(args)
    if n_bad == 0 or subnormal == 0 or not got.is_floating_point():
        return None
    mask = bad.reshape(-1).to(got.device)
    g = got.reshape(-1)[mask].to(torch.float64)
    e = exact.reshape(-1).to(got.device)[mask]
    flushed = (g == 0) & (e != 0) & e.isfinite()
    if int(flushed.sum()) < PRECISION_SHARE * n_bad:
        return None
    where = mask.nonzero().reshape(-1)[flushed][:3].tolist()
    sample = ", ".join(f"[{i}] = {float(exact.reshape(-1)[i]):.3g}" for i in where)
    return (f"{int(flushed.sum())} of the {n_bad} wrong elements came back 0 where the exact value is not "
            f"(e.g. {sample}), and the inputs hold {subnormal} subnormal fp32 values (|x| < "
            f"{torch.finfo(torch.float32).tiny:.3g}): the row flushes subnormals to zero (FTZ: --use_fast_math, "
            "-ftz=true or a .ftz instruction); the contract keeps them (IEEE gradual underflow)")


def guard_band_defects(guards: list[_Guarded]) -> list[str]:
    """One message per guarded tensor whose surrounding bytes changed: how many, and where the first is."""
    found = []
    for g in guards:
        after = g.base.clone()
        typed = after.view(g.tensor.dtype).as_strided(g.tensor.shape, g.tensor.stride(), g.tensor.storage_offset())
        typed.copy_(_typed_bits(CANARY_BYTE, g.tensor.dtype, g.base.device).expand(g.tensor.shape))
        bad = (after != CANARY_BYTE).nonzero().flatten()
        if bad.numel():
            start = g.tensor.storage_offset() * g.tensor.element_size()
            end = start + _span(g.tensor.shape, g.tensor.stride()) * g.tensor.element_size()
            first = int(bad[0])
            where = (f"at its start - {start - first} bytes" if first < start else
                     f"at its end + {first - end} bytes" if first >= end else
                     f"byte {first - start} of its span, between its elements")
            found.append(f"{bad.numel()} bytes changed around {g.name} {tuple(g.tensor.shape)}, first {where}")
    return found


# ------------------------------------------------------------------ the other checks


def poison_free_memory(nbytes: int, device: torch.device) -> None:
    """Fill blocks of the allocator's free memory with the poison pattern, so an unwritten allocation shows it."""
    nbytes = max(int(nbytes), 512)
    blocks = [torch.full((nbytes,), POISON_BYTE, dtype=torch.uint8, device=device) for _ in range(2)]
    del blocks


def snapshot(args: Sequence[Any]) -> list[torch.Tensor | None]:
    return [a.clone() if isinstance(a, torch.Tensor) else None for a in args]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaNs with the same payload are equal)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        size = _INT_OF_SIZE[a.element_size()]
        return bool(torch.equal(a.contiguous().view(size), b.contiguous().view(size)))
    return bool(torch.equal(a, b))


def changed_arguments(before: Sequence[torch.Tensor | None], args: Sequence[Any]) -> list[str]:
    """Messages for each tensor argument that is not bit for bit what it was before the call."""
    found = []
    for i, (old, new) in enumerate(zip(before, args)):
        if old is None or not isinstance(new, torch.Tensor) or same_bits(old, new):
            continue
        diff = (old.view(-1) != new.reshape(-1)) if not old.is_floating_point() else \
            (old.reshape(-1).view(_INT_OF_SIZE[old.element_size()]) != new.reshape(-1).view(_INT_OF_SIZE[old.element_size()]))
        where = diff.nonzero().flatten()
        first = int(where[0]) if where.numel() else 0
        found.append(f"argument {i + 1} {tuple(new.shape)} changed in {int(diff.sum())} elements, first at flat "
                     f"index {first}")
    return found


def unwritten_count(got: torch.Tensor, exact: torch.Tensor) -> int:
    """Elements of ``got`` that still hold the poison pattern where the exact answer is not NaN."""
    if not got.is_floating_point() or got.numel() == 0:
        return 0
    poisoned = got.contiguous().view(_INT_OF_SIZE[got.element_size()]) == -1
    return int((poisoned.to(exact.device) & ~torch.isnan(exact)).sum())


#: A delay long enough for a small kernel launched on another stream to run before the inputs exist.
SIDE_STREAM_DELAY_CYCLES = 2_000_000
