"""What keeps a timed call honest beyond the timer: new content every call, checked results, a memo probe.

Published reward hacks (wafer.ai's field guide, Makora's list, GPU MODE's pygpubench and
reference-kernels) beat a timer without touching it: the kernel remembers (outputs by content, by
pointer, a result cached from an earlier call), or behaves differently once it has been called a few
times (warm-up detection). The harness answers each while it times (rapid_llm.bench.harness):

* **new content for every call**, warm-up calls included: each argument set's floating tensors are
  rewritten from a pristine copy times a random positive factor per element (signs, zeros, inf and NaN
  kept, so the op's input contract holds; integer tensors such as positions are left alone), the factor
  drawn from one of several laws (:data:`LAWS`) per call, so an answer that only fits one law (a constant,
  a subsample) is wrong on another. The rewrite happens half a rotation ahead of the set's use, so it has
  left L2 by the time the set is timed;
* **checked calls**: :data:`CHECKED_CALLS` timed calls, drawn at random (the kernel cannot know which), keep copies of
  their inputs and results; afterwards each is compared with the op's floor row (``bench(...,
  reference=)``; bench_op and compare pass it) or else an untimed call of the row itself, on the same
  content at new addresses. A pointer memo, a result cached from another call, or work skipped once
  warm-up is over returns something else there: ``timed_output_wrong``. One more call at a checked call's
  own addresses, new content written there first, catches a memo keyed by pointer even when every timed
  call had addresses of its own (a rotation longer than the run): ``pointer_memo``;
* **a memo probe**: timed passes the same in every way but that each call gets one content the row
  has already seen (copied into the rotating sets as new content is) instead of new content. A row
  that is twice as fast on content it has seen, on every call, remembers instead of computing:
  ``content_memo``, once a second probe round agrees (a burst of load on the machine can slow one
  round's new-content passes; a memo is fast every time);
* **plain results**: a call that returns a tensor subclass or another object where a tensor is due (a result
  computed when it is read, or one whose comparisons answer for it) is refused: ``lazy_result``;
* the warm-up count varies at random, so counting calls does not find the timed ones.

The persisting-L2 cap is rapid_llm.bench.l2_persist's (``persisting_l2``). Each refusal raises
:class:`BenchRefused`, and no figure comes back. ``bench(..., integrity=False)`` times without
these (a CUDA graph replays fixed addresses and content, so graph timing never has them).
"""
from __future__ import annotations

import math
import random
import statistics
from typing import Any, Callable

import torch

__all__ = ["BenchRefused", "REFUSALS", "Guard", "CHECKED_CALLS", "PROBE_CALLS", "MEMO_RATIO", "LAWS", "compare",
           "not_plain"]

#: Each refusal's name and what it means.
REFUSALS = {
    "timed_output_wrong": "a timed call's result differs from the reference's on the same content at new "
                          "addresses: the row remembers by pointer, returns a result cached from another call, "
                          "or skips work once warm-up is over",
    "pointer_memo": "a call at addresses the row had already seen, with new content there, returned the result "
                    "of the content it saw before: the row remembers results by pointer",
    "content_memo": "calls on content the row has already seen are much faster than on new content: the row "
                    "remembers results instead of computing them",
    "persisting_l2": "the row set a persisting-L2 carve-out or access-policy window, which keeps its data in L2 "
                     "through any flush or rotation",
    "lazy_result": "a call returned a tensor subclass or a non-tensor where a tensor is due: a result computed "
                   "when read (outside the timer), or one whose comparisons answer for it",
    "timer_patched": "the row replaced a function a timer calls (a Python entry point or the runtime's native "
                     "code); the harness times with references of its own, and refuses the run",
    "checker_tampered": "the row rebound a function or constant the reference or the check calls, so a wrong "
                        "result could agree with a reference made just as wrong",
    "above_roofline": "the figure moves bytes faster than the device reads them (its measured read roofline) "
                      "from a working set larger than L2: work escaped the timer",
    "dependent_overlap": "in the CUDA graph of back-to-back calls, the row's kernels are programmatic dependent "
                         "launches the binding's switch does not reach (rapid_llm.bench.dependent): each call "
                         "overlaps the one before, so the graph's time per call is less than a call costs alone",
}
#: A row that skips its work on a fraction SKIP_FRACTION of calls, or more, escapes the checked calls with
#: probability at most ESCAPE: (1 - p)^n <= ESCAPE for n checked calls drawn at random among the timed ones.
SKIP_FRACTION, ESCAPE = 0.1, 0.05
#: Timed calls whose results are checked (drawn at random among the timed calls): 29; every timed call where
#: there are fewer.
CHECKED_CALLS = math.ceil(math.log(ESCAPE) / math.log(1 - SKIP_FRACTION))
#: Bytes of checked calls' copies held at once; past it the checks made so far are judged and dropped (between
#: timed calls, outside the events), so 29 checks of a gigabyte-sized call fit in memory.
CHECK_BYTES = 2 << 30
#: Timed calls in the memo probe's pass.
PROBE_CALLS = 10
#: Seen content this much faster than new content (medians, and every seen call faster) means a memo.
MEMO_RATIO = 0.5
#: A result agrees when within this fraction of its own largest finite magnitude (or relatively): far
#: above any rounding or reduction-order difference, far below what other content gives.
AGREE = 0.05
#: Extra warm-up calls, drawn at random up to this many.
WARMUP_JITTER = 4
#: The laws new content is drawn from, one per call: per-element factors uniform in [0.5, 1.5) ("spread"), or
#: 2**U(-4, 4), a heavy spread of magnitudes a subsample misses ("wide"); each keeps signs, zeros, inf and NaN.
LAWS = ("spread", "wide")
#: (callable id, argument shapes) the memo probe passed in this process.
_PROBED: dict[tuple, Any] = {}


class BenchRefused(RuntimeError):
    """The harness will not give a figure for this call: ``kind`` is one of :data:`REFUSALS`."""

    def __init__(self, kind: str, label: str, detail: str) -> None:
        self.kind, self.label, self.detail = kind, label, detail
        super().__init__(f"bench refused {label or 'the call'}: {kind}: {detail} ({REFUSALS[kind]})")


#: On a CPU, drawing a factor per element of a large table (rope's cos/sin cache: 4M elements) cost more than
#: the call it refreshed: there, factors are drawn fresh for a block of this many elements and laid over the
#: tensor from a random offset (content still new on every call, in every element).
CPU_FACTOR_BLOCK = 1 << 16


def _factors(p: torch.Tensor, law: str, gen: torch.Generator) -> torch.Tensor:
    """Random factors of ``law`` shaped like ``p``, fp32, on its device (see :data:`CPU_FACTOR_BLOCK`)."""
    n = p.numel()
    block = CPU_FACTOR_BLOCK if p.device.type == "cpu" and n > 2 * CPU_FACTOR_BLOCK else n
    factor = torch.empty(block, dtype=torch.float32, device=p.device)
    if law == "wide":
        factor.uniform_(-4.0, 4.0, generator=gen).exp2_()
    else:
        factor.uniform_(0.5, 1.5, generator=gen)
    if block == n:
        return factor.view(p.shape)
    offset = int(torch.randint(block, (1,), generator=gen))
    return factor.repeat(-(-(n + offset) // block))[offset:offset + n].view(p.shape)


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            seen.setdefault(id(a), a)
    return list(seen.values())


def _refreshable(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors that get new content: floating inputs (an ``out=`` buffer is overwritten anyway)."""
    out = kwargs.get("out")
    return [t for t in _tensors(args, kwargs) if t.is_floating_point() and t is not out and t.numel()]


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_copy(v) for v in value)
    return value


def compare(got: Any, want: Any, where: str = "result") -> str | None:
    """Why ``got`` is not ``want`` (tensors, tuples of them, None), or None when they agree."""
    if isinstance(want, (tuple, list)) and isinstance(got, (tuple, list)):
        if len(got) != len(want):
            return f"{where}: {len(got)} values, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = compare(g, w, f"{where}[{i}]")
            if why:
                return why
        return None
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        return None if (got is None) == (want is None) else f"{where}: {type(got).__name__}, expected " \
                                                            f"{type(want).__name__}"
    if got.shape != want.shape:
        return f"{where}: shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dtype == want.dtype and got.device == want.device and torch.equal(got, want):
        return None  # the usual answer (the same code on the same content), without the fp64 comparison's copies
    if not want.is_floating_point():
        bad = (got != want).sum().item()
        return f"{where}: {bad} of {want.numel()} elements differ" if bad else None
    g, w = got.double(), want.double()
    finite = torch.isfinite(w)
    scale = w[finite].abs().max().item() if finite.any() else 1.0
    close = torch.isclose(g, w, rtol=AGREE, atol=AGREE * max(scale, 1e-30), equal_nan=True)
    bad = int((~close).sum().item())
    if bad:
        return f"{where}: {bad} of {want.numel()} elements differ by more than {AGREE:g} of the result's scale"
    return None


def not_plain(result: Any) -> str | None:
    """Why a call's result is not plain tensors (a tuple or list of them, or None), or None when it is."""
    if isinstance(result, (tuple, list)):
        return next((why for r in result if (why := not_plain(r))), None)
    if result is None or type(result) is torch.Tensor:
        return None
    if isinstance(result, torch.Tensor):
        return f"returned a {type(result).__qualname__}, a torch.Tensor subclass"
    return f"returned a {type(result).__qualname__} where a tensor is due"


def _differs(got: Any, inputs_after: list[torch.Tensor], want: Any, want_args: tuple, want_kwargs: dict) -> str | None:
    """Why a call (its result, and its tensor arguments afterwards: an in-place op's output) is not the reference
    call's on the same content (``want``, and ``want_args``/``want_kwargs`` after it), or None."""
    return compare(got, want) or next(
        (w for i, (g, t) in enumerate(zip(inputs_after, _tensors(want_args, want_kwargs)))
         if (w := compare(g, t, f"argument tensor {i} after the call"))), None)


class Guard:
    """New content for each call over the rotating argument sets, and the checked calls' evidence.

    Calls are numbered by position: warm-up first, then the timed ones; position ``p`` uses set
    ``p % len(sets)``. Call :meth:`start` once, :meth:`before` and :meth:`after` around each call,
    then :meth:`check`.
    """

    def __init__(self, sets: list[tuple[tuple, dict]], warmup: int, repeats: int, device: torch.device,
                 clone_set: Callable[[tuple, dict], tuple[tuple, dict]], fixed: tuple[tuple, dict] | None = None,
                 checks: bool = True) -> None:
        if len(sets) < 2:
            raise ValueError("Guard needs two argument sets or more (one is refreshed while another is in use)")
        self.sets, self.repeats, self.clone_set, self.device = sets, repeats, clone_set, device
        self.fixed = fixed  # the memo probe's pass: every call on this content (seen before), nothing checked
        rng = random.SystemRandom()
        self.warmup = warmup + rng.randrange(WARMUP_JITTER + 1)
        self.total = self.warmup + repeats
        self.lead = max(1, len(sets) // 2)
        self.pristine = [t.clone() for t in _refreshable(*sets[0])]
        self.staging = clone_set(*sets[0])
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(rng.getrandbits(62))
        timed = range(self.warmup, self.total)
        self.checked = set(rng.sample(timed, min(CHECKED_CALLS, len(timed)))) if checks and fixed is None else set()
        self.before_copies: dict[int, tuple[tuple, dict]] = {}
        self.after_copies: dict[int, tuple[Any, list[torch.Tensor]]] = {}
        self.lazy: tuple[int, str] | None = None  # the first call that returned no plain tensor, and what it did
        self.set_bytes = sum(t.numel() * t.element_size() for t in _tensors(*sets[0]))

    def set_of(self, position: int) -> int:
        return position % len(self.sets)

    def _refresh(self, args: tuple, kwargs: dict, law: str = "spread") -> None:
        """New content in a set: the pristine tensors times a fresh random factor per element, of ``law``."""
        for t, p in zip(_refreshable(args, kwargs), self.pristine):
            factor = _factors(p, law, self.gen)
            if t.dtype == torch.float32 and p.dtype == torch.float32:
                torch.mul(p, factor, out=t)
            else:
                t.copy_(p.float() * factor)

    def _prepare(self, position: int) -> None:
        if position >= self.total:
            return
        k = self.set_of(position)
        # New content is made in the staging set and copied in; the probe's pass makes it too and copies its
        # fixed content instead: the two passes do the same work between calls (on CPU, caches remember it).
        self._refresh(*self.staging, law=LAWS[position % len(LAWS)] if self.fixed is None else "spread")
        for t, f in zip(_tensors(*self.sets[k]), _tensors(*(self.fixed or self.staging))):
            t.copy_(f)
        if position in self.checked:
            self.before_copies[position] = self.clone_set(*self.sets[k])

    def start(self) -> None:
        for position in range(min(self.lead, self.total)):
            self._prepare(position)

    def before(self, position: int) -> None:
        """Before call ``position``: new content for the set used ``lead`` calls later."""
        self._prepare(position + self.lead)

    def after(self, position: int, result: Any) -> None:
        if self.lazy is None and (why := not_plain(result)):
            self.lazy = (position, why)
        if position in self.checked:
            inputs = _tensors(*self.sets[self.set_of(position)])
            self.after_copies[position] = (_copy(result), [t.clone() for t in inputs])

    def held_bytes(self) -> int:
        """Roughly what the checked calls' copies hold now (inputs before, inputs and result after)."""
        return self.set_bytes * (len(self.before_copies) + 2 * len(self.after_copies))

    def drain(self, fn: Callable[..., Any], label: str, reference: Callable[..., Any] | None = None) -> None:
        """Judge the checked calls made so far and drop their copies (raises BenchRefused)."""
        if self.lazy is not None:
            position, why = self.lazy
            when = "warm-up" if position < self.warmup else f"timed call {position - self.warmup + 1} of {self.repeats}"
            raise BenchRefused("lazy_result", label, f"{when}: {why}")
        for position in sorted(self.after_copies):
            args, kwargs = self.before_copies.pop(position)
            got, inputs_after = self.after_copies.pop(position)
            want = (reference or fn)(*args, **kwargs)
            why = _differs(got, inputs_after, want, args, kwargs)
            if why:
                raise BenchRefused("timed_output_wrong", label,
                                   f"timed call {position - self.warmup + 1} of {self.repeats}: {why}")

    def check(self, fn: Callable[..., Any], label: str, reference: Callable[..., Any] | None = None) -> None:
        """Each checked call against ``reference`` (else an untimed call of ``fn``) on a copy of its content, at
        new addresses (raises BenchRefused). Only a reference catches a row that stays wrong after warm-up."""
        self.drain(fn, label, reference)
        if self.checked:
            self._check_addresses(fn, label, reference, min(self.checked))

    def _check_addresses(self, fn: Callable[..., Any], label: str, reference: Callable[..., Any] | None,
                         position: int) -> None:
        """One more call at the addresses of timed call ``position``, new content written there first, against
        ``reference`` on a copy. A rotation longer than the run gives each timed call addresses of its own, so a
        pointer memo never hits while timed (and gains nothing); this call is where it shows, by name."""
        args, kwargs = self.sets[self.set_of(position)]
        self._refresh(args, kwargs)
        copy_args, copy_kwargs = self.clone_set(args, kwargs)
        got = _copy(fn(*args, **kwargs))
        inputs_after = [t.clone() for t in _tensors(args, kwargs)]
        want = (reference or fn)(*copy_args, **copy_kwargs)
        why = _differs(got, inputs_after, want, copy_args, copy_kwargs)
        if why:
            raise BenchRefused("pointer_memo", label, f"at the addresses of timed call "
                                                      f"{position - self.warmup + 1}, with new content: {why}")

    def memo_key(self, fn: Callable[..., Any]) -> tuple:
        return (id(fn), tuple((tuple(t.shape), t.dtype) for t in _tensors(*self.sets[0])))

    def probe_passes(self, fn: Callable[..., Any], repeats: int) -> "tuple[Guard, Guard] | None":
        """The memo probe's two kinds of timed pass, (seen content, new content), or None when this callable
        and shapes passed the probe already in this process (a memo shows on its first probe; the samples of
        one comparison need not each pay for another).

        A seen pass gives every call one content the row has already seen, copied into the rotating sets the
        way new content is; a new pass gives each call new content, unchecked. They are timed A B B A, so
        drift (warm-up, clocks) falls on both alike, and differ only in the content."""
        if self.memo_key(fn) in _PROBED:
            return None
        fixed = self.clone_set(*self.sets[0])
        args, kwargs = self.clone_set(*fixed)
        fn(*args, **kwargs)  # the row has now seen this content (an in-place op wrote the copy, not ``fixed``)
        # two warm-up calls each: the harness measures the host's queueing cost from them, as in the main pass
        return (Guard(self.sets, 2, repeats, self.device, self.clone_set, fixed=fixed),
                Guard(self.sets, 2, repeats, self.device, self.clone_set, checks=False))

    @staticmethod
    def medians_apart(seen_us: list[float], new_us: list[float]) -> bool:
        """Seen content's median call much faster than new content's: what a memo shows, and what one stall
        rarely fakes (it moves one call, not the median)."""
        return statistics.median(seen_us) < MEMO_RATIO * statistics.median(new_us)

    @staticmethod
    def looks_like_memo(seen_us: list[float], new_us: list[float]) -> bool:
        """Seen content much faster than new: the medians far apart, and every seen call faster than every new
        one (a memo hits each time; a stall in one pass, such as a host gap the GPU waited through, moves a
        median but not every call)."""
        return Guard.medians_apart(seen_us, new_us) and max(seen_us) < min(new_us)

    def judge_memo(self, fn: Callable[..., Any], seen_us: list[float], new_us: list[float], label: str) -> None:
        """Raise BenchRefused (content_memo) when seen content ran much faster than new content."""
        if self.looks_like_memo(seen_us, new_us):
            new, seen = statistics.median(new_us), statistics.median(seen_us)
            raise BenchRefused("content_memo", label, f"{seen:.2f} us per call on content it had seen, {new:.2f} us "
                                                      f"on new content (medians of {len(seen_us)} and {len(new_us)})")
        _PROBED[self.memo_key(fn)] = fn  # held, so its id is not reused by another callable
