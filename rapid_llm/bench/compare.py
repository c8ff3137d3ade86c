"""``compare(a, b)``: is row B faster than row A, on which shapes, is it still right, and why.

One call does what a kernel author otherwise pieces together:

1. **Right first.** Both rows go through ``verify`` (its oracle, tolerance and
   defect checks, a JIT row's first run in a child process), nothing recorded.
   A side that fails is not timed, and the result says why.
2. **Timed interleaved.** Per dtype and size, samples come in pairs, A then B,
   then B then A, ... Each sample is the harness's figure (``bench``: CUDA
   events, cold L2 by rotating argument sets, median of ``repeats`` calls), so
   the two rows see the same machine state within a pair and drift cancels
   (rapid_llm.bench.paired_stats has the statistics and why). A pilot of
   ``min_pairs`` measures the noise; the run then goes on to the number of
   pairs that detects a 3 % difference with 80 % power, or until ``seconds``
   per shape are spent. Where a call is short (under 200 us), host time per
   call is compared the same way: what a caller pays when the host dominates.
3. **Why.** Build facts (registers, spills, shared memory, stack), occupancy,
   the launch configuration of one call, and a SASS diff per kernel that
   ignores register renaming and label moves (rapid_llm.bench.build_diff).

Either side may be a row as it was: ``"jit/scale@HEAD~2"`` (a git revision)
or ``"jit/scale_vec@build:3fa9c1"`` (a saved build by source digest; see
rapid_llm.bench.row_versions). Results keep both sides' source digests.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from rapid_llm.bench import paired_stats, row_versions
from rapid_llm.bench.build_diff import BuildDiff
from rapid_llm.bench.harness import bench, bench_host
from rapid_llm.bench.ops import HOST_TIMED_BELOW_US, floor_call, make_args
from rapid_llm.bench.paired_stats import PairedEstimate
from rapid_llm.bench.row_versions import RowVersion, VersionError
from rapid_llm.kernels import platform

__all__ = ["Side", "ShapeResult", "Comparison", "compare", "CompareError", "DEFAULT_SIZES_CUDA", "DEFAULT_SIZES_CPU"]

DEFAULT_SIZES_CUDA = (1 << 16, 1 << 20, 1 << 24)
DEFAULT_SIZES_CPU = (4096,)
#: Host time is compared in this many interleaved pairs of bench_host rounds.
HOST_PAIRS = 7


class CompareError(ValueError):
    """The comparison cannot be made as asked; the message names the op and the problem."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: which row, which version of it, and whether it passed verify."""

    label: str            # "A" or "B"
    row: str              # the row's name (``jit/scale@1a2b3c4`` for an earlier version)
    origin: str           # "working tree", "commit 1a2b3c4", "saved build ..."
    digest: str | None    # its source's digest
    verdict: str = "not verified"   # "pass", "FAIL: ..." or "not verified"
    report: Any = field(default=None, repr=False, compare=False)  # the GoldenReport

    @property
    def passed(self) -> bool:
        return self.verdict in ("pass", "not verified")

    def describe(self) -> str:
        digest = f", source {self.digest[:10]}" if self.digest else ""
        return f"{self.label} = {self.row} ({self.origin}{digest})"


@dataclass(frozen=True)
class ShapeResult:
    """The timing of one dtype and size: both sides' samples, paired, and what they say."""

    dtype: str
    numel: int
    kind: str                          # "cuda" (device time) or "cpu" (CPU numbers)
    a_us: tuple[float, ...]
    b_us: tuple[float, ...]
    estimate: PairedEstimate
    pairs_for_effect: int | None       # pairs the measured noise needs to detect ``effect``
    stopped: str                       # why sampling stopped
    host: PairedEstimate | None = None
    host_a_us: float | None = None
    host_b_us: float | None = None

    @property
    def a_median(self) -> float:
        return _median(self.a_us)

    @property
    def b_median(self) -> float:
        return _median(self.b_us)

    @property
    def verdict(self) -> str:
        return self.estimate.verdict

    @property
    def host_dominates(self) -> bool:
        """A caller pays host time, not device time, on at least one side."""
        return (self.host_a_us is not None and self.host_b_us is not None
                and max(self.host_a_us - self.a_median, self.host_b_us - self.b_median) > 0)

    def cells(self) -> tuple[str, ...]:
        e = self.estimate
        ci = f"{e.low:.3f}-{e.high:.3f}" if math.isfinite(e.low) else "-"
        verdict = {paired_stats.FASTER: f"B faster ({e.speedup:.2f}x)",
                   paired_stats.SLOWER: f"B slower ({e.ratio:.2f}x)"}.get(e.verdict, e.verdict)
        need = "-" if self.pairs_for_effect is None else str(self.pairs_for_effect)
        host = "-"
        if self.host is not None:
            host = f"{self.host_a_us:.2f} / {self.host_b_us:.2f} us, B/A {self.host.ratio:.3f}"
            if self.host_dominates:
                host += " (host dominates)"
        return (self.dtype, str(self.numel), f"{self.a_median:.2f}", f"{self.b_median:.2f}", f"{e.ratio:.3f}", ci,
                verdict, f"{e.pairs} ({need})", host)


HEAD = ("dtype", "numel", "A us", "B us", "B/A", "95% CI", "verdict", "pairs (3% needs)", "host per call A / B")


@dataclass
class Comparison:
    """What ``compare`` found: both sides, each shape's figures and verdict, and why they differ."""

    op: str
    a: Side
    b: Side
    device: str
    shapes: list[ShapeResult] = field(default_factory=list)
    why: BuildDiff | None = None
    refused: str | None = None          # why nothing was timed
    effect: float = 0.03
    power: float = 0.8
    repeats: int = 0
    notes: list[str] = field(default_factory=list)

    def header(self) -> str:
        return f"compare({self.op!r}) on {self.device}: {self.a.describe()}; {self.b.describe()}"

    def rule(self) -> str:
        cold = ", cold L2" if any(s.kind == "cuda" for s in self.shapes) else ""
        return (f"B/A: geometric mean of B's time over A's in pairs taken A B, B A, ... (each sample the harness's "
                f"median of {self.repeats} calls{cold}); 95% Student-t interval on the log-ratios; a verdict "
                f"when it excludes 1. Pairs: a pilot measures the noise, then as many as detect "
                f"{100 * self.effect:g}% with {100 * self.power:.0f}% power, within the time given per shape")

    def table(self) -> list[tuple[str, ...]]:
        return [HEAD, *(s.cells() for s in self.shapes)]

    def to_dict(self) -> dict[str, Any]:
        """The figures as plain data (what a results file keeps): both sides' digests included."""
        def side(s: Side) -> dict[str, Any]:
            return {"row": s.row, "origin": s.origin, "digest": s.digest, "verdict": s.verdict}

        return {"op": self.op, "device": self.device, "a": side(self.a), "b": side(self.b), "refused": self.refused,
                "effect": self.effect, "power": self.power, "repeats": self.repeats,
                "shapes": [{"dtype": s.dtype, "numel": s.numel, "kind": s.kind, "ratio": s.estimate.ratio,
                            "ci": [s.estimate.low, s.estimate.high], "pairs": s.estimate.pairs,
                            "sd_log": s.estimate.sd_log, "verdict": s.verdict, "a_median_us": s.a_median,
                            "b_median_us": s.b_median, "pairs_for_effect": s.pairs_for_effect, "stopped": s.stopped,
                            "host_a_us": s.host_a_us, "host_b_us": s.host_b_us,
                            "host_ratio": None if s.host is None else s.host.ratio}
                           for s in self.shapes]}

    def __str__(self) -> str:
        lines = [self.header(), f"verified first: A {self.a.verdict}, B {self.b.verdict}"]
        if self.refused:
            lines.append(f"not timed: {self.refused}")
        if self.shapes:
            rows = self.table()
            widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD) - 1)]
            lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
            if any(s.kind != "cuda" for s in self.shapes):
                lines.append("these are CPU numbers (no GPU here): the verdicts are about this CPU")
            lines.append(self.rule())
        if self.why is not None:
            lines.append("why (A -> B):")
            lines.append(self.why.text())
        lines += self.notes
        return "\n".join(line.rstrip() for line in lines)

    def __repr__(self) -> str:
        return str(self)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return math.nan if n == 0 else (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)


# ------------------------------------------------------------------ the call


def compare(a: Any, b: Any, sizes: Sequence[int] | None = None, dtypes: Sequence[str] | None = None, *,
            device: Any = None, verify: bool = True, why: bool = True, seconds: float = 10.0,
            min_pairs: int = 20, max_pairs: int = 2000, repeats: int = 20, warmup: int = 3,
            effect: float = 0.03, power: float = 0.8, host: bool | None = None) -> Comparison:
    """Compare row ``b`` with row ``a`` (two rows of one op): verified, timed interleaved, explained.

    ``a`` and ``b`` are row names (``"jit/scale"``, ``"jit/scale@HEAD~1"``,
    ``"jit/scale@build:3fa9c1"``), KernelSpecs or RowVersions. ``sizes`` are
    element counts of the op's bench case (default 64K, 1M, 16M on a GPU);
    ``dtypes`` default to the first dtype both rows take. ``seconds`` bounds
    the sampling per shape; ``min_pairs`` is the pilot that measures the
    noise. ``verify=False`` skips the checks (for repeated timing of rows
    already checked); ``why=False`` skips build facts and SASS. ``host``
    compares host time per call too (default: where a call is under 200 us
    on a GPU).
    """
    import torch

    if min_pairs < paired_stats.MIN_PAIRS:
        raise CompareError(f"compare: min_pairs must be at least {paired_stats.MIN_PAIRS}, got {min_pairs}")
    if max_pairs < min_pairs:
        raise CompareError(f"compare: max_pairs ({max_pairs}) is below min_pairs ({min_pairs})")
    if not seconds > 0 or repeats < 1 or warmup < 0:
        raise CompareError(f"compare: seconds must be > 0, repeats >= 1 and warmup >= 0 (got {seconds}, {repeats}, "
                           f"{warmup})")
    try:
        va, vb = row_versions.version(a), row_versions.version(b)
    except (VersionError, LookupError, ValueError) as exc:
        raise CompareError(f"compare: {exc}") from None
    op = va.spec.op
    if vb.spec.op != op:
        raise CompareError(f"compare: {va.name} is a row of op {op!r} and {vb.name} of op {vb.spec.op!r}; "
                           "compare takes two rows of one op")
    dev = _device(op, va, vb, device, torch)
    dtypes = _dtypes(op, va, vb, dtypes)
    sizes = _sizes(op, sizes, dev)
    result = Comparison(op, Side("A", va.name, va.origin, va.digest), Side("B", vb.name, vb.origin, vb.digest),
                        platform.device_label(dev), effect=effect, power=power, repeats=repeats)
    with row_versions.registered(va, vb):
        if verify:
            result.a, result.b = _verified(result.a, va, dtypes, dev), _verified(result.b, vb, dtypes, dev)
            failed = [s for s in (result.a, result.b) if not s.passed]
            if failed:
                result.refused = "; ".join(f"{s.label} ({s.row}) failed verify: {s.verdict}" for s in failed) + \
                                 " (a wrong kernel's speed means nothing; its golden report says where it differs)"
        if result.refused is None:
            for dtype in dtypes:
                for numel in sizes:
                    result.shapes.append(_time_shape(op, va, vb, dtype, numel, dev, seconds=seconds,
                                                     min_pairs=min_pairs, max_pairs=max_pairs, repeats=repeats,
                                                     warmup=warmup, effect=effect, power=power, host=host))
        if why:
            result.why = _why(op, va, vb, dtypes[0], sizes, dev)
    return result


def _device(op: str, va: RowVersion, vb: RowVersion, device: Any, torch: Any) -> Any:
    if device is None:
        both_cuda = all("cuda" in v.spec.devices for v in (va, vb))
        device = "cuda" if torch.cuda.is_available() and both_cuda else "cpu"
    dev = torch.device(device)
    for v in (va, vb):
        if dev.type not in v.spec.devices:
            raise CompareError(f"compare({op!r}): {v.name} runs on {', '.join(v.spec.devices)} only, not {dev.type}")
        avail = v.spec.probe(dev)
        if not avail:
            raise CompareError(f"compare({op!r}): {v.name} cannot run on {dev.type} here: "
                               f"{avail.reason or 'its toolchain probe says no'}")
    return dev


def _dtypes(op: str, va: RowVersion, vb: RowVersion, dtypes: Sequence[str] | None) -> list[str]:
    common = [d for d in va.spec.dtypes if d in vb.spec.dtypes]
    if dtypes is None:
        if not common:
            raise CompareError(f"compare({op!r}): {va.name} and {vb.name} share no dtype "
                               f"({', '.join(va.spec.dtypes)} vs {', '.join(vb.spec.dtypes)})")
        return [next((d for d in ("bf16", "fp16", "fp32") if d in common), common[0])]
    if isinstance(dtypes, str):
        dtypes = [dtypes]
    for d in dtypes:
        for v in (va, vb):
            if d not in v.spec.dtypes:
                raise CompareError(f"compare({op!r}): {v.name} does not take {d!r} (its dtypes: "
                                   f"{', '.join(v.spec.dtypes)})")
    if not dtypes:
        raise CompareError(f"compare({op!r}): give at least one dtype")
    return list(dtypes)


def _sizes(op: str, sizes: Sequence[int] | None, dev: Any) -> list[int]:
    if sizes is None:
        return list(DEFAULT_SIZES_CUDA if dev.type == "cuda" else DEFAULT_SIZES_CPU)
    if isinstance(sizes, int):
        sizes = [sizes]
    out = []
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CompareError(f"compare({op!r}): sizes are element counts >= 1, got {n!r}")
        out.append(int(n))
    if not out:
        raise CompareError(f"compare({op!r}): give at least one size")
    return out


def _verified(side: Side, v: RowVersion, dtypes: list[str], dev: Any) -> Side:
    """``side`` with its verify verdict (the row's own checks, nothing recorded into the registry)."""
    from rapid_llm.kernels.verification.golden import GoldenError
    from rapid_llm.kernels.verification.golden import verify as golden_verify

    try:
        report = golden_verify(v.name, dtypes=dtypes, device=dev, record=False)
    except GoldenError as exc:
        return Side(side.label, side.row, side.origin, side.digest, f"FAIL: cannot be verified here: {exc}")
    failed = [f"{r.dtype} {r.verdict}" for r in report.results if not r.passed]
    verdict = "pass" if report.passed else "FAIL: " + ("; ".join(failed) or report._header().split(": ", 1)[-1])
    return Side(side.label, side.row, side.origin, side.digest, verdict, report)


def _time_shape(op: str, va: RowVersion, vb: RowVersion, dtype: str, numel: int, dev: Any, *, seconds: float,
                min_pairs: int, max_pairs: int, repeats: int, warmup: int, effect: float, power: float,
                host: bool | None) -> ShapeResult:
    """Interleaved pairs of harness samples of A and B on one bench case, as many as the noise needs."""
    case = make_args(op, numel, platform.torch_dtype(dtype), dev)
    fns = {"A": va.spec.call_path(), "B": vb.spec.call_path()}
    for fn in fns.values():  # built, compiled and loaded before any sample
        fn(*case.args, **case.kwargs)

    floor = floor_call(op)

    def sample(side: str) -> Any:
        return bench(fns[side], *case.args, warmup=warmup, repeats=repeats, roofline=False, label=side,
                     reference=floor, **case.kwargs)

    a_us: list[float] = []
    b_us: list[float] = []
    target, kind, stopped = min_pairs, "cuda", ""
    start = time.monotonic()  # a budget for sampling, not a timer: the figures come from the harness
    while True:
        order = ("A", "B") if len(a_us) % 2 == 0 else ("B", "A")
        for side in order:
            r = sample(side)
            kind = r.kind
            (a_us if side == "A" else b_us).append(r.median_us)
        n = len(a_us)
        if n == min_pairs or (n > min_pairs and n % 10 == 0):
            sd = paired_stats.estimate(a_us, b_us).sd_log
            target = max(min_pairs, min(max_pairs, paired_stats.pairs_needed(sd, effect, power)))
        if n >= target:
            stopped = f"{n} pairs detect {100 * effect:g}% with {100 * power:.0f}% power at this noise"
            break
        if time.monotonic() - start > seconds and n >= min_pairs:
            stopped = f"time given per shape ({seconds:g} s) spent at {n} of {target} pairs"
            break
        if n >= max_pairs:
            stopped = f"max_pairs ({max_pairs}) reached"
            break
    est = paired_stats.estimate(a_us, b_us)
    need = paired_stats.pairs_needed(est.sd_log, effect, power) if math.isfinite(est.sd_log) else None
    host_est, ha, hb = None, None, None
    short = max(_median(a_us), _median(b_us)) < HOST_TIMED_BELOW_US
    if host or (host is None and kind == "cuda" and short):
        host_est, ha, hb = _host_pairs(fns, case)
    return ShapeResult(dtype, numel, kind, tuple(a_us), tuple(b_us), est, need, stopped, host_est, ha, hb)


def _host_pairs(fns: dict[str, Any], case: Any) -> tuple[PairedEstimate, float, float]:
    """Host cost per call of A and B (bench_host rounds), interleaved like the device samples."""
    got: dict[str, list[float]] = {"A": [], "B": []}
    for i in range(HOST_PAIRS):
        for side in (("A", "B") if i % 2 == 0 else ("B", "A")):
            r = bench_host(fns[side], *case.args, n=200, rounds=1, warmup=20, **case.kwargs)
            got[side].append(r.median_us)
    return paired_stats.estimate(got["A"], got["B"]), _median(got["A"]), _median(got["B"])


def _why(op: str, va: RowVersion, vb: RowVersion, dtype: str, sizes: list[int], dev: Any) -> BuildDiff:
    """Build facts, occupancy and SASS of both rows, and the launches of one call of each at each size."""
    from rapid_llm.bench import build_diff, launch_config
    from rapid_llm.kernels.inspection.inspector import inspect

    try:
        out = build_diff.diff_inspections(inspect(va.spec), inspect(vb.spec))
    except Exception as exc:  # the timing stands without the explanation; say what went wrong
        out = BuildDiff(notes=[f"build facts: inspect failed: {type(exc).__name__}: {exc}"])
    for numel in sizes:
        case = make_args(op, numel, platform.torch_dtype(dtype), dev)
        got = {}
        for label, v in (("A", va), ("B", vb)):
            launches, missing = launch_config.capture(v.spec.call_path(), *case.args, **case.kwargs)
            if missing:
                out.notes.append(missing)
                return out
            got[label] = [f"{x.kernel.split('(')[0]}: {x.config()}" for x in launches]
        out.launches[f"{dtype} numel={numel}"] = (got["A"], got["B"])
    return out
