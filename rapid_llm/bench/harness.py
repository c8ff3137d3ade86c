"""Time a kernel the same way every time: the only timer in rapid_llm.

GPU timing uses CUDA events around each call. Three things keep the figures
honest:

* cold L2: when one argument set fits in the cache, the call cycles through
  clones of its tensors whose total exceeds ``COLD_FACTOR`` times the L2 size
  the device reports, so every call reads from HBM as it would in a model;
* no host gaps: a short ``torch.cuda._sleep`` keeps the GPU busy while the
  host queues the timed calls, so the events bracket GPU work, not launch
  latency (``bench_host`` measures that cost separately);
* order statistics: the median and the 20th/80th percentiles of per-call
  times, never the mean, which one preempted call would drag.

On CPU tensors the same entry points time with ``perf_counter_ns`` loops and
label the result as CPU numbers.

Every clock is the harness's own (rapid_llm.bench.clock: references taken at
import, GPU intervals read by the driver), and a row that replaces a timer's
entry point or what the check relies on is refused by name
(rapid_llm.bench.tamper). No figure above the device's measured read
bandwidth comes back (``above_roofline``).
"""
from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from rapid_llm.bench import clock, dependent, l2_persist
from rapid_llm.bench.integrity import CHECK_BYTES, PROBE_CALLS, BenchRefused, Guard
from rapid_llm.bench.tamper import Watch
from rapid_llm.kernels.platform import device_label

__all__ = [
    "BenchRefused",
    "copy_roofline",
    "read_roofline",
    "BenchResult",
    "bench",
    "bench_stateful",
    "bench_host",
    "rotation_sets",
    "device_of",
    "device_label",
    "l2_bytes",
]

DEFAULT_WARMUP = 5
DEFAULT_REPEATS = 50
#: Rotating argument sets must cover this many L2 sizes for a call to find the cache cold.
COLD_FACTOR = 3
#: Upper bound on rotating sets: below ~50 KB per set a kernel is launch-latency bound and
#: L2 residency no longer moves its time, so more clones would only cost memory and graph nodes.
MAX_ROTATION_SETS = 1024
#: Longest the GPU is held idle while the host queues timed calls.
_MAX_HOLD_US = 50_000.0
#: Host cost of queueing one timed call (two events and a launch), generously.
_QUEUE_US_PER_CALL = 30.0
#: CPU samples aim for this much work each, so timer resolution never matters.
_CPU_SAMPLE_NS = 1_000_000


@dataclass(frozen=True)
class BenchResult:
    """Per-call latency figures of one benchmark, plus throughput when the work size is known.

    ``kind`` is ``"cuda"`` (GPU time from CUDA events), ``"cpu"`` (a CPU
    computation timed on the host) or ``"host"`` (host-side cost per call of
    whatever ``fn`` does, e.g. dispatch overhead before a GPU launch).
    """

    median_us: float
    p20_us: float
    p80_us: float
    repeats: int
    device: str
    kind: str
    bytes_moved: int | None = None
    flops: int | None = None
    roofline_gbps: float | None = None
    cold_l2: bool = False
    rotation_sets: int = 1
    graph: bool = False
    label: str = ""
    samples_us: tuple[float, ...] = field(default=(), repr=False)

    @property
    def is_cpu(self) -> bool:
        """True when these are not GPU-kernel times (CPU work, or host-side cost)."""
        return self.kind != "cuda"

    @property
    def gbps(self) -> float | None:
        if self.bytes_moved is None:
            return None
        return self.bytes_moved / (self.median_us * 1e-6) / 1e9

    @property
    def tflops(self) -> float | None:
        if self.flops is None:
            return None
        return self.flops / (self.median_us * 1e-6) / 1e12

    @property
    def roofline_fraction(self) -> float | None:
        """Achieved bandwidth over the copy bandwidth the harness measured on this device."""
        gbps = self.gbps
        if gbps is None or not self.roofline_gbps:
            return None
        return gbps / self.roofline_gbps

    def figures(self) -> dict[str, Any]:
        """The numbers worth storing: latency percentiles and derived throughput."""
        out = {k: v for k, v in asdict(self).items() if k != "samples_us"}
        out.update(gbps=self.gbps, tflops=self.tflops, roofline_fraction=self.roofline_fraction)
        return out

    def __str__(self) -> str:
        parts = [f"{self.median_us:.2f} us (p20 {self.p20_us:.2f}, p80 {self.p80_us:.2f}, n={self.repeats})"]
        if self.gbps is not None:
            parts.append(f"{self.gbps:.1f} GB/s")
        if self.roofline_fraction is not None:
            parts.append(f"{100 * self.roofline_fraction:.0f}% of copy")
        if self.tflops is not None:
            parts.append(f"{self.tflops:.2f} TFLOP/s")
        where = {"cuda": self.device, "cpu": f"CPU numbers, {self.device}", "host": f"host-side cost, {self.device}"}
        tag = where[self.kind]
        if self.graph:
            tag += ", CUDA graph"
        label = f"{self.label}: " if self.label else ""
        return f"{label}{', '.join(parts)} [{tag}]"


# ---------------------------------------------------------------- arguments


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]


def device_of(args: tuple, kwargs: dict | None = None) -> torch.device:
    """The device the call runs on: that of its first CUDA tensor, else CPU."""
    for t in _tensors(args, kwargs or {}):
        if t.is_cuda:
            return t.device
    return torch.device("cpu")


def l2_bytes(device: torch.device) -> int:
    """The L2 size the device reports (0 for CPU: no rotation there)."""
    if device.type != "cuda":
        return 0
    return int(torch.cuda.get_device_properties(device).L2_cache_size)


def _set_bytes(args: tuple, kwargs: dict) -> int:
    seen: dict[int, int] = {}
    for t in _tensors(args, kwargs):
        seen[t.data_ptr()] = max(seen.get(t.data_ptr(), 0), t.numel() * t.element_size())
    return sum(seen.values())


def rotation_sets(set_bytes: int, l2: int) -> int:
    """How many argument sets to cycle through so that each call finds L2 cold.

    One set is enough when it alone exceeds ``COLD_FACTOR`` x L2 (or there is
    no L2 to defeat); otherwise enough clones to cover that, capped at
    ``MAX_ROTATION_SETS``.
    """
    if l2 <= 0 or set_bytes <= 0 or set_bytes >= COLD_FACTOR * l2:
        return 1
    return min(MAX_ROTATION_SETS, math.ceil(COLD_FACTOR * l2 / set_bytes))


def clone_layout(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its strides and its storage offset modulo 16 bytes: a view (``buf[:, :H]``, a
    transpose, an unaligned start) stays that view, so a kernel is timed on the layout it was given and
    takes the same code path (``Tensor.clone`` makes any view dense and aligned)."""
    if t.is_contiguous() and t.storage_offset() == 0:
        return t.clone()
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    pad = t.storage_offset() % max(1, 16 // t.element_size())
    base = torch.empty(span + pad, dtype=t.dtype, device=t.device)
    out = base.as_strided(t.shape, t.stride(), pad)
    out.copy_(t)
    return out


def _clone_set(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Fresh copies of every tensor argument, each with its layout; aliasing between arguments is kept."""
    memo: dict[int, torch.Tensor] = {}

    def fresh(a: Any) -> Any:
        if not isinstance(a, torch.Tensor):
            return a
        if id(a) not in memo:
            memo[id(a)] = clone_layout(a)
        return memo[id(a)]

    return tuple(fresh(a) for a in args), {k: fresh(v) for k, v in kwargs.items()}


def _quantile(sorted_vals: list[float], q: float) -> float:
    pos = q * (len(sorted_vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def _summarise(samples: list[float], **meta: Any) -> BenchResult:
    vals = sorted(samples)
    return BenchResult(median_us=_quantile(vals, 0.5), p20_us=_quantile(vals, 0.2), p80_us=_quantile(vals, 0.8),
                       repeats=len(vals), samples_us=tuple(samples), **meta)


def _check_counts(name: str, warmup: int, repeats: int) -> None:
    if warmup < 0:
        raise ValueError(f"{name}: warmup must be >= 0, got {warmup}")
    if repeats < 1:
        raise ValueError(f"{name}: repeats must be >= 1, got {repeats}")


# ------------------------------------------------------------------- timing


def _hold_gpu(repeats: int, per_call_us: float = _QUEUE_US_PER_CALL) -> None:
    """Keep the stream busy while the host queues ``repeats`` timed calls."""
    hold_us = min(_MAX_HOLD_US, repeats * per_call_us)
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(hold_us * 2000))  # ~2 GHz: slightly long is harmless, short only re-exposes gaps


def _cuda_samples(call: Callable[[int], Any], n_sets: int, warmup: int, repeats: int,
                  reset: Callable[[int], Any] | None, device: torch.device, guard: Guard | None = None,
                  drain: Callable[[], None] | None = None, watch: Watch | None = None) -> list[float]:
    """Per-call microseconds from event pairs; ``drain`` judges the checked calls when their copies fill
    CHECK_BYTES, ``watch`` is checked after the last call (with the first timed interval read both ways)."""
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        l2_persist.cap(stream)
        if guard is not None:
            warmup = guard.warmup
            guard.start()
        queue_us = 0.0
        for i in range(warmup):
            t0 = clock.perf_counter()
            if reset is not None:
                reset(i % n_sets)
            if guard is not None:
                guard.before(i)
            result = call(i % n_sets)
            if guard is not None:
                guard.after(i, result)
            queue_us = (clock.perf_counter() - t0) * 1e6  # the last warm-up call's host cost, queueing included
        clock.synchronize()
        starts = [clock.new_event() for _ in range(repeats)]
        ends = [clock.new_event() for _ in range(repeats)]
        # the GPU is held for the host's queueing of the calls, new content included
        per_call_us = _QUEUE_US_PER_CALL if guard is None else max(_QUEUE_US_PER_CALL, 2 * queue_us)
        chunk = max(1, int(_MAX_HOLD_US // per_call_us))
        held = 0  # timed calls queued since the GPU was last held
        for r in range(repeats):
            if held % chunk == 0:
                _hold_gpu(min(chunk, repeats - r), per_call_us)
            held += 1
            k = (warmup + r) % n_sets
            if reset is not None:
                reset(k)
            if guard is not None:
                guard.before(warmup + r)
            clock.record(starts[r])
            result = call(k)
            clock.record(ends[r])
            if guard is not None:
                guard.after(warmup + r, result)
                if drain is not None and guard.held_bytes() > CHECK_BYTES:
                    clock.synchronize()  # between timed calls: the next one starts behind a new hold
                    drain()
                    held = 0
        clock.synchronize()
        _refuse_persisting(stream)
        if watch is not None:
            watch.check("", (starts[0], ends[0]))
        return [clock.elapsed_ms(s, e) * 1e3 for s, e in zip(starts, ends)]


def _graph_samples(call: Callable[[int], Any], n_sets: int, warmup: int, repeats: int,
                   device: torch.device) -> list[float]:
    """Replay a graph of one call per argument set; per-call time is replay time / calls. Refused where the
    calls overlap one another through programmatic launches the binding's switch does not reach
    (rapid_llm.bench.dependent: ``dependent_overlap``)."""
    calls = max(n_sets, 8)
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        l2_persist.cap(stream)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # capture needs the code path warmed outside the graph
            for i in range(max(warmup, 1)):
                call(i % n_sets)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = dependent.kept_graph()  # its edges are read: calls may not overlap one another (dependent.py)
        with torch.cuda.graph(graph):
            for i in range(calls):
                call(i % n_sets)
        dependent.refuse_overlap(graph, calls, lambda: call(0))
        dependent.ready(graph)
        graph.replay()
        torch.cuda.synchronize()
        starts = [clock.new_event() for _ in range(repeats)]
        ends = [clock.new_event() for _ in range(repeats)]
        _hold_gpu(repeats)
        for r in range(repeats):
            clock.record(starts[r])
            graph.replay()
            clock.record(ends[r])
        clock.synchronize()
        _refuse_persisting(stream)
        return [clock.elapsed_ms(s, e) * 1e3 / calls for s, e in zip(starts, ends)]


def _refuse_persisting(stream: int) -> None:
    """Raise BenchRefused when the timed calls left persisting L2 set (rapid_llm.bench.l2_persist); cap it again."""
    left = l2_persist.state(stream)
    l2_persist.cap(stream)
    if left is not None and left.persisting:
        raise BenchRefused("persisting_l2", "", f"after the timed calls the context had {left.describe()}")


def _cpu_samples(call: Callable[[int], Any], warmup: int, repeats: int, reset: Callable[[], Any] | None,
                 guard: Guard | None = None, drain: Callable[[], None] | None = None) -> list[float]:
    if guard is not None:
        warmup = guard.warmup
        guard.start()
    for i in range(warmup):
        if reset is not None:
            reset()
        if guard is not None:
            guard.before(i)
        result = call(i % 2)
        if guard is not None:
            guard.after(i, result)
    inner = 1
    if reset is None and guard is None:  # batch fast calls so each sample is long against the clock's resolution
        t0 = clock.perf_counter_ns()
        call(0)
        one = max(clock.perf_counter_ns() - t0, 1)
        inner = max(1, min(10_000, _CPU_SAMPLE_NS // one))
    samples = []
    for r in range(repeats):
        if reset is not None:
            reset()
        if guard is not None:  # one call per sample: each on new content
            guard.before(warmup + r)
            t0 = clock.perf_counter_ns()
            result = call((warmup + r) % 2)
            samples.append((clock.perf_counter_ns() - t0) / 1e3)
            guard.after(warmup + r, result)
            if drain is not None and guard.held_bytes() > CHECK_BYTES:
                drain()
            continue
        t0 = clock.perf_counter_ns()
        for _ in range(inner):
            call(0)
        samples.append((clock.perf_counter_ns() - t0) / inner / 1e3)
    return samples


def _roofline(device: torch.device, bytes_moved: int | None, roofline: bool) -> float | None:
    if bytes_moved is None or not roofline:
        return None

    return copy_roofline(device)


def _run(name: str, fn: Callable[..., Any], args: tuple, kwargs: dict, *, label: str,
         reference: Callable[..., Any] | None = None, plausible: bool = True, **how: Any) -> BenchResult:
    """Time ``fn`` (rapid_llm.bench.integrity's checks with ``integrity``), watching what it changes in the process
    (rapid_llm.bench.tamper), and refuse a figure above the read roofline unless ``plausible`` is off (the
    harness's own roofline measurements). A refusal raises BenchRefused with ``label``."""
    _check_counts(name, how["warmup"], how["repeats"])
    if not callable(fn):
        raise TypeError(f"{name}: fn must be callable, got {type(fn).__name__}")
    device = device_of(args, kwargs)
    try:
        watch = Watch(reference, device)
        result = _measure(name, fn, args, kwargs, device, label=label, reference=reference, watch=watch, **how)
        watch.check(label)
        if plausible:
            _refuse_above_roofline(result, device)
        return result
    except BenchRefused as exc:
        if exc.label or not label:
            raise
        raise BenchRefused(exc.kind, label, exc.detail) from None


def _measure(name: str, fn: Callable[..., Any], args: tuple, kwargs: dict, device: torch.device, *,
             reset: Callable[..., Any] | None, bytes_moved: int | None, flops: int | None, cold_l2: bool, graph: bool,
             warmup: int, repeats: int, roofline: bool, label: str, integrity: bool = False,
             reference: Callable[..., Any] | None = None, watch: Watch | None = None) -> BenchResult:
    meta = dict(device=device_label(device), bytes_moved=bytes_moved, flops=flops, label=label)
    guarded = integrity and reset is None and not graph
    if device.type != "cuda":
        if graph:
            raise ValueError(f"{name}: graph=True needs CUDA tensors; these arguments are on CPU")
        if reset is not None:
            samples = _cpu_samples(lambda k: fn(*args, **kwargs), warmup, repeats, lambda: reset(*args, **kwargs))
        else:
            sets = [(args, kwargs)] + ([_clone_set(args, kwargs)] if guarded else [])
            guard = Guard(sets, warmup, repeats, device, _clone_set) if guarded else None

            def call_cpu(k: int) -> Any:
                return fn(*sets[k % len(sets)][0], **sets[k % len(sets)][1])

            drain = None if guard is None else (lambda: guard.drain(fn, label, reference))
            samples = _cpu_samples(call_cpu, warmup, repeats, None, guard, drain)
            if watch is not None:
                watch.check(label)  # before the checks, which call the reference
            if guard is not None:
                _judge(guard, fn, reference, lambda g: _cpu_samples(call_cpu, 0, g.repeats, None, g), label)
        return _summarise(samples, kind="cpu", roofline_gbps=_roofline(device, bytes_moved, roofline), **meta)

    n_sets = rotation_sets(_set_bytes(args, kwargs), l2_bytes(device)) if cold_l2 else 1
    if guarded:
        n_sets = max(n_sets, 2)  # one set gets new content while another is timed
    sets = [(args, kwargs)] + [_clone_set(args, kwargs) for _ in range(n_sets - 1)]

    def call(k: int) -> Any:
        a, kw = sets[k]
        return fn(*a, **kw)

    reset_k = None if reset is None else (lambda k: reset(*sets[k][0], **sets[k][1]))
    try:
        if graph:
            samples = _graph_samples(call, n_sets, warmup, repeats, device)
        else:
            guard = Guard(sets, warmup, repeats, device, _clone_set) if guarded else None
            drain = None if guard is None else (lambda: guard.drain(fn, label, reference))
            samples = _cuda_samples(call, n_sets, warmup, repeats, reset_k, device, guard, drain, watch)
            if guard is not None:
                _judge(guard, fn, reference, lambda g: _cuda_samples(call, n_sets, 0, g.repeats, None, device, g),
                       label)
    finally:
        del sets
    return _summarise(samples, kind="cuda", roofline_gbps=_roofline(device, bytes_moved, roofline),
                      cold_l2=cold_l2, rotation_sets=n_sets, graph=graph, **meta)


#: Memo-probe rounds that must look like a memo before the verdict. A round whose medians are not apart
#: clears the row; one whose medians are apart but whose calls overlap (a stall slowed one seen call: seen on
#: a loaded machine, 14 test workers on 16 cores) is run again, at most MEMO_RETRIES times.
MEMO_CONFIRMATIONS = 2
MEMO_RETRIES = 2


def _judge(guard: Guard, fn: Callable[..., Any], reference: Callable[..., Any] | None,
           timed_pass: Callable[[Guard], list[float]], label: str) -> None:
    """The checked calls, then the memo probe's pass (rapid_llm.bench.integrity); raises BenchRefused."""
    guard.check(fn, label, reference)
    passes = guard.probe_passes(fn, PROBE_CALLS // 2)
    if passes is not None:
        seen, new = passes
        confirmed, retries = 0, 0
        while True:  # a memo shows every time; a burst of load on the machine rarely twice
            seen_us, new_us = timed_pass(seen), timed_pass(new)  # A B B A
            new_us += timed_pass(new)
            seen_us += timed_pass(seen)
            if guard.looks_like_memo(seen_us, new_us):
                confirmed += 1
                if confirmed == MEMO_CONFIRMATIONS:
                    break
            elif guard.medians_apart(seen_us, new_us) and retries < MEMO_RETRIES:
                retries += 1
            else:
                break
        guard.judge_memo(fn, seen_us, new_us, label)


def bench(fn: Callable[..., Any], *args: Any, bytes_moved: int | None = None, flops: int | None = None,
          cold_l2: bool = True, graph: bool = False, warmup: int = DEFAULT_WARMUP,
          repeats: int = DEFAULT_REPEATS, roofline: bool = True, label: str = "", integrity: bool = True,
          reference: Callable[..., Any] | None = None, **kwargs: Any) -> BenchResult:
    """Time ``fn(*args, **kwargs)``; per-call median and 20/80th percentiles.

    Give ``bytes_moved`` (bytes read plus written) for GB/s and the fraction
    of the measured copy roofline, ``flops`` for TFLOP/s. ``graph=True``
    captures the calls in a CUDA graph so launch overhead drops out of the
    figure. ``fn`` must not depend on state it mutates: use
    :func:`bench_stateful` for that.

    The timer is the current stream's: CUDA events are recorded there, so work
    ``fn`` launches on another stream is not in the figure (``verify`` names
    such a row, ``other_stream``). Cold L2 rotates argument sets larger than
    L2 together, in graph mode too (the graph replays calls over every set).

    ``integrity`` (outside graph mode) gives every call new content, checks
    a few timed calls' results and probes for a memo
    (rapid_llm.bench.integrity); a persisting-L2 carve-out is always capped
    and checked. A row caught raises :class:`BenchRefused` and gives no figure.
    ``reference`` (the op's floor row, say) is what the checked calls are
    compared with; without it, an untimed call of ``fn`` itself.
    """
    return _run("bench", fn, args, kwargs, reset=None, bytes_moved=bytes_moved, flops=flops, cold_l2=cold_l2,
                graph=graph, warmup=warmup, repeats=repeats, roofline=roofline, label=label, integrity=integrity,
                reference=reference)


def bench_stateful(fn: Callable[..., Any], reset: Callable[..., Any], *args: Any, bytes_moved: int | None = None,
                   flops: int | None = None, cold_l2: bool = True, warmup: int = DEFAULT_WARMUP,
                   repeats: int = DEFAULT_REPEATS, roofline: bool = True, label: str = "",
                   **kwargs: Any) -> BenchResult:
    """Time an op that mutates its inputs (a KV-cache append, an in-place update).

    ``reset(*args, **kwargs)`` restores the inputs before every call, outside
    the timed region, so each call starts from the same state. There is no
    graph mode: a graph would time the reset too.
    """
    if not callable(reset):
        raise TypeError(f"bench_stateful: reset must be callable, got {type(reset).__name__}")
    return _run("bench_stateful", fn, args, kwargs, reset=reset, bytes_moved=bytes_moved, flops=flops,
                cold_l2=cold_l2, graph=False, warmup=warmup, repeats=repeats, roofline=roofline, label=label)


def bench_host(fn: Callable[..., Any], *args: Any, n: int = 1000, rounds: int = 7, warmup: int = 100,
               label: str = "", **kwargs: Any) -> BenchResult:
    """Host-side cost per call: what Python, dispatch and the launch cost before the GPU sees work.

    Each round times ``n`` back-to-back calls; the result is the median over
    rounds of the per-call cost. Queued GPU work drains between rounds, so a
    full launch queue never stalls a timed round.
    """
    _check_counts("bench_host", warmup, rounds)
    if n < 1:
        raise ValueError(f"bench_host: n must be >= 1, got {n}")
    device = device_of(args, kwargs)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *a: None)
    for _ in range(warmup):
        fn(*args, **kwargs)
    sync(device)
    samples = []
    for _ in range(rounds):
        t0 = clock.perf_counter_ns()
        for _ in range(n):
            fn(*args, **kwargs)
        samples.append((clock.perf_counter_ns() - t0) / n / 1e3)
        sync(device)
    return _summarise(samples, kind="host", device=device_label(device), label=label)


# ---------------------------------------------------------------- the copy roofline
# A memory-bound kernel cannot beat a copy of the same bytes, so its GB/s over
# the copy's GB/s says how much of the hardware it uses. The copy is measured
# by the same harness, on the same device, rather than taken from a datasheet:
# datasheet bandwidth is never reached, and a fraction of it flatters no one.

#: Per-tensor size of the CPU copy: past the last-level cache of common server CPUs.
ROOFLINE_BYTES_CPU = 64 << 20
#: Per-tensor floor of the GPU copy; it is raised to 4x L2 where that is larger.
ROOFLINE_BYTES_GPU = 1 << 30

_lock = threading.Lock()
_cache: dict[str, float] = {}


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.copy_(src)


def _read(total: torch.Tensor, src: torch.Tensor) -> None:
    torch.sum(src, dim=0, dtype=torch.float32, out=total)


#: A figure may sit this far above the measured read roofline (itself a measurement, a few percent from the bound).
READ_MARGIN = 1.05


def _refuse_above_roofline(r: BenchResult, device: torch.device) -> None:
    """Raise BenchRefused (above_roofline) when a GPU figure from a working set past COLD_FACTOR x L2 moves its bytes
    faster than the device reads: no kernel can, so work escaped the timer (another stream, a host thread, a
    patched clock)."""
    if device.type != "cuda" or not r.bytes_moved or r.kind != "cuda":
        return
    touched = r.bytes_moved * (r.rotation_sets if r.cold_l2 else 1)  # what the timed calls cycle through
    if touched < COLD_FACTOR * l2_bytes(device) or r.gbps is None:
        return
    limit = read_roofline(device)
    if r.gbps > READ_MARGIN * limit:
        raise BenchRefused("above_roofline", r.label, f"{r.gbps:.0f} GB/s ({100 * r.gbps / limit:.0f}% of the "
                                                      f"{limit:.0f} GB/s this device reads) with {r.bytes_moved} "
                                                      f"bytes a call, more than L2 ({l2_bytes(device)})")


def copy_roofline(device: torch.device | str | None = None) -> float:
    """GB/s (bytes read plus written) of a large copy on ``device``; measured once per device per process."""
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
        result = _run("copy_roofline", _copy, (dst, src), {}, reset=None, bytes_moved=2 * nbytes, flops=None,
                      roofline=False, cold_l2=False, graph=False, integrity=False, warmup=3, repeats=repeats,
                      label=f"copy roofline, {device_label(device)}", plausible=False)
        del src, dst
        _cache[key] = float(result.gbps)
        return _cache[key]


def read_roofline(device: torch.device | str | None = None) -> float:
    """GB/s of a large read (a sum over ROOFLINE_BYTES_GPU, at least 4x L2) on a GPU: the fastest any kernel moves
    bytes from DRAM, the bound no figure may pass; measured once per device per process."""
    device = torch.device(device if device is not None else "cuda")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = f"read {device}"
    with _lock:
        if key in _cache:
            return _cache[key]
        nbytes = max(ROOFLINE_BYTES_GPU, 4 * l2_bytes(device))
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
        total = torch.empty((), dtype=torch.float32, device=device)
        result = _run("read_roofline", _read, (total, src), {}, reset=None, bytes_moved=nbytes, flops=None,
                      roofline=False, cold_l2=False, graph=False, integrity=False, warmup=3, repeats=30,
                      label=f"read roofline, {device_label(device)}", plausible=False)
        del src, total
        _cache[key] = float(result.gbps)
        return _cache[key]
