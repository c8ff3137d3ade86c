"""Verified autotune of a row: compile every candidate of its search space, verify each, time the ones that
pass with the harness's checks, and pin the winner for this GPU kind.

Autotuners elsewhere time whatever compiles and keep the fastest figure, so a candidate that is wrong at
one shape, or fast because it skipped work, can win, and the winner changes with timing noise from rank to
rank. Here a candidate is timed only after it passed the same verify as any row (the float64 oracle, the
defect checks; JIT code in the warm child process, so a crash costs the candidate, not the notebook), and
timed only by ``bench`` with its integrity checks (fresh content, checked calls, the timer guarded): a
candidate that fails either is never timed further and never pinned. One pass over a space ranks by noise
as much as by speed (the fastest of many near-equal candidates is the luckiest), so the winner is pinned
only where interleaved, paired timings against the untuned row (rapid_llm.bench.compare) find it faster
at one token count at least and slower at none; otherwise the row keeps its own defaults and the result
says why. A confirmed winner is pinned per (GPU kind, source digest) in a table every process reads
(rapid_llm.kernels.registry.pins), so every rank runs the same config, and dispatch and explain name it.

The space comes from the row: a CUDA source's ``// rapid_llm tune:`` line (rapid_llm.kernels.toolchain.
tune_space), or a Triton row's ``tune_space`` (the launcher's keyword arguments).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from rapid_llm.bench import paired_stats
from rapid_llm.bench.compare import Comparison, compare
from rapid_llm.bench.harness import BenchRefused, bench
from rapid_llm.bench.ops import floor_call, make_args
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.opdecl import get_decl
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec, RegistryError, resolve_ref
from rapid_llm.kernels.registry import pins
from rapid_llm.kernels.toolchain.jit_row import JitRow
from rapid_llm.kernels.registry.tune_space import SearchSpace, config_flags, config_label

__all__ = ["tune", "TuneResult", "Candidate", "TuneError", "DEFAULT_TOKENS"]

#: The token counts a candidate is timed at (the op's bench case, ``token_numel`` elements a token): decode,
#: a batch of decodes, a chunk of prefill, a long prefill. The score is the geometric mean over them. Each
#: is a whole bench() with its checks (about 0.15 s on an H100), so four, not the peer benchmark's six.
DEFAULT_TOKENS = (1, 128, 1024, 4096)
#: What verify checks a candidate at: a one-element call, a tail past every vector width, a few rows of the
#: bench hidden size; the op's edge cases (odd shapes, strides, special values) run at every size anyway.
VERIFY_SIZES = (1, 4097, 1 << 16)
#: Seconds of interleaved pairs (winner against the untuned row) a token count gets before a pin, at least
#: CONFIRM_PAIRS pairs of CONFIRM_REPEATS calls each: a 3 % difference on an H100 needs about 20 pairs.
CONFIRM_SECONDS = 2.0
CONFIRM_PAIRS = 20
CONFIRM_REPEATS = 10

Progress = Callable[[str, int, int], None]  # (stage, done, total)


class TuneError(ValueError):
    """A row that cannot be tuned here: names the row and why."""


@dataclass
class Candidate:
    """One config of the space and what became of it."""

    index: int
    config: dict[str, Any]
    state: str = "pending"  # pending | build_failed | verify_failed | refused | timed
    why: str = ""
    build_s: float | None = None
    verify_s: float | None = None
    times_us: dict[int, float] = field(default_factory=dict)  # tokens -> median us
    record: GoldenRecord | None = field(default=None, repr=False)  # its verify's verdict, when it ran

    @property
    def label(self) -> str:
        return config_label(self.config)

    @property
    def score_us(self) -> float | None:
        """The geometric mean of its medians over the tuned token counts (None until timed)."""
        if self.state != "timed" or not self.times_us:
            return None
        return math.exp(sum(math.log(t) for t in self.times_us.values()) / len(self.times_us))


@dataclass
class TuneResult:
    """Every candidate, the winner and its pin, the untuned row's figures, and where the seconds went."""

    row: str
    op: str
    device: str
    dtype: str
    tokens: tuple[int, ...]
    space: SearchSpace
    candidates: list[Candidate]
    untuned: Candidate
    winner: Candidate | None
    pin: pins.Pin | None
    seconds: dict[str, float]
    confirmation: Comparison | None = None  # the winner (B) against the untuned row (A), interleaved
    not_pinned: str = ""  # why a winner was not pinned

    @property
    def confirmed(self) -> bool:
        """The paired timings found the winner faster than the untuned row somewhere and slower nowhere."""
        return self.confirmation is not None and beats(self.confirmation)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.candidates:
            out[c.state] = out.get(c.state, 0) + 1
        return out

    @property
    def speedup(self) -> float | None:
        """The untuned row's score over the winner's (>1: the tuned config is faster)."""
        if self.winner is None or self.untuned.score_us is None or self.winner.score_us is None:
            return None
        return self.untuned.score_us / self.winner.score_us

    def summary(self) -> str:
        counts = ", ".join(f"{n} {state}" for state, n in sorted(self.counts().items()))
        secs = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
        lines = [f"tune {self.row} on {self.device} ({self.dtype}, T = {', '.join(map(str, self.tokens))}): "
                 f"{len(self.candidates)} candidates: {counts}; {secs}"]
        if self.winner is None:
            lines.append("no candidate passed: nothing pinned")
        else:
            speed = f", {self.speedup:.3f}x the untuned row" if self.speedup else ""
            lines.append(f"winner #{self.winner.index} {self.winner.label}: {self.winner.score_us:.2f} us geomean"
                         f" (untuned {_us(self.untuned.score_us)}{speed})")
            if self.confirmation is not None:
                lines.append(f"against the untuned row, interleaved: {_verdicts(self.confirmation, self.tokens)}")
            if self.pin is not None:
                kept = "" if self.pin.config == self.winner.config else " (an earlier pin of this code holds)"
                lines.append(f"pinned: {self.pin.describe()}{kept}")
            elif self.not_pinned:
                lines.append(f"not pinned: {self.not_pinned}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def table(self, top: int | None = None) -> list[dict[str, Any]]:
        """One dict per candidate, fastest timed first, then the rest by state."""
        order = sorted(self.candidates, key=lambda c: (c.score_us is None, c.score_us or 0.0, c.index))
        rows = [{"#": c.index, "config": c.label, "state": c.state, "geomean_us": c.score_us,
                 **{f"T={t}": c.times_us.get(t) for t in self.tokens}, "build_s": c.build_s, "why": c.why}
                for c in order]
        return rows[:top] if top else rows

    def plot(self, ax: Any = None) -> Any:
        """Every timed candidate's geomean against its index in the space (the winner and the untuned row
        marked), the failed ones as crosses on the axis: the shape of the space at a glance."""
        if ax is None:  # matplotlib's Agg canvas directly, never pyplot: a notebook's backend is left alone
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure

            fig = Figure(figsize=(8, 3.2))
            FigureCanvasAgg(fig)
            ax = fig.add_subplot()
        timed = [c for c in self.candidates if c.score_us is not None]
        failed = [c for c in self.candidates if c.state not in ("timed", "pending")]
        ax.scatter([c.index for c in timed], [c.score_us for c in timed], s=14, label="timed (verified)")
        if failed:
            low = min((c.score_us for c in timed), default=1.0)
            ax.scatter([c.index for c in failed], [low * 0.97] * len(failed), marker="x", color="tab:red",
                       label="build/verify failed or refused")
        if self.untuned.score_us is not None:
            ax.axhline(self.untuned.score_us, color="gray", ls="--", lw=1, label="untuned row")
        if self.winner is not None:
            ax.scatter([self.winner.index], [self.winner.score_us], s=60, color="tab:green", zorder=3,
                       label=f"winner {self.winner.label}")
        ax.set_xlabel("candidate (index in the space)")
        ax.set_ylabel(f"geomean us over T={','.join(map(str, self.tokens))}")
        ax.set_title(f"tune {self.row} on {self.device} ({self.dtype})")
        ax.legend(fontsize=7)
        return ax.figure


def beats(comparison: Comparison) -> bool:
    """B (the winner) is faster than A (the untuned row) at one shape at least and slower at none."""
    verdicts = [s.verdict for s in comparison.shapes]
    return paired_stats.FASTER in verdicts and paired_stats.SLOWER not in verdicts


def _verdicts(comparison: Comparison, tokens: Sequence[int]) -> str:
    if comparison.refused:
        return comparison.refused
    out = []
    for t, s in zip(tokens, comparison.shapes):
        e = s.estimate
        ci = f", 95% CI {e.low:.3f}-{e.high:.3f}" if math.isfinite(e.low) else ""
        out.append(f"T={t} {s.verdict} (winner/untuned {e.ratio:.3f}{ci}, {e.pairs} pairs)")
    return "; ".join(out)


def _confirm(untuned: KernelSpec, winner: KernelSpec, op: str, dtype: str, tokens: Sequence[int], per_token: int,
             device: torch.device, seconds: float) -> Comparison:
    """The winner against the untuned row, interleaved pairs at each token count (both verified already)."""
    return compare(untuned, winner, sizes=[t * per_token for t in tokens], dtypes=[dtype], device=device,
                   verify=False, why=False, seconds=seconds, min_pairs=CONFIRM_PAIRS, repeats=CONFIRM_REPEATS,
                   host=False)


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} us"


def _target_space(row: KernelSpec) -> SearchSpace:
    target = row.target
    if isinstance(target, JitRow):
        space = target.space()
        if space is None:
            raise TuneError(f"tune({row.name!r}): its source declares no search space; add a line "
                            '// rapid_llm tune: {"NAME": [values, ...]} and read NAME as a macro with a default')
        return space
    space = getattr(row, "tune_space", None)
    if space is None:
        raise TuneError(f"tune({row.name!r}): only a JIT row whose source declares a search space, or a row "
                        "registered with tune_space=, can be tuned")
    return space if isinstance(space, SearchSpace) else SearchSpace.from_dict(space, f"row {row.name}")


def _candidate_row(row: KernelSpec, index: int, config: dict[str, Any]) -> KernelSpec:
    """The candidate as a row of its own (verify and bench take rows): the row with the config fixed."""
    if isinstance(row.target, JitRow):
        t = row.target
        target: Any = JitRow(t.source, t.fn, out=t.out, flags=t.base_flags, config=config)
    else:
        base = resolve_ref(row.target)  # the launcher itself, not the pinned config's partial

        def target(*args: Any, **kwargs: Any) -> Any:
            return base(*args, **kwargs, **config)

    return dataclasses.replace(row, name=f"{row.name}@{index}", target=target, tune_space=None,
                               golden=GoldenRecord(verified=False, baseline=row.golden.baseline),
                               description=f"tune candidate {config_label(config)} of {row.name}")


def _build(c: Candidate, row: KernelSpec) -> None:
    """Compile the candidate (a JIT row; a Triton row compiles on its first call, in verify)."""
    if not isinstance(row.target, JitRow):
        return
    from rapid_llm.kernels.toolchain import jit

    started = time.perf_counter()
    t = row.target
    try:
        jit.build_jit(t.source.stem, t.source, extra_cuda_cflags=t.base_flags + config_flags(c.config))
    except jit.BuildError as exc:
        c.state, c.why = "build_failed", _first_error(exc.log)
    except ImportError as exc:
        c.state, c.why = "build_failed", f"the built module did not load: {exc}"
    c.build_s = time.perf_counter() - started


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip()[:200]
    return (log.strip().splitlines() or ["the compiler failed"])[-1][:200]


def _verify(c: Candidate, cand: KernelSpec, dtypes: Sequence[str], device: torch.device) -> None:
    from rapid_llm.kernels.verification.golden import verify

    started = time.perf_counter()
    report = verify(cand.name, dtypes=dtypes, sizes=VERIFY_SIZES, device=device, record=True)
    c.verify_s = time.perf_counter() - started
    c.record = report.record
    if not report.passed:
        bad = next((r for r in report.results if not r.passed), None)
        c.state = "verify_failed"
        reasons = bad.failure_reasons() if bad is not None else []
        c.why = (f"{bad.dtype}: {'; '.join(reasons)}" if bad is not None and reasons
                 else "; ".join(report.notes) or "verify failed")[:300]


def _time(c: Candidate, cand: KernelSpec, op: str, dtype: str, tokens: Sequence[int], device: torch.device,
          token_numel: int) -> None:
    fn = _spec.get_row(cand.name).call_path()
    tdtype = platform.torch_dtype(dtype)
    for t in tokens:
        case = make_args(op, t * token_numel, tdtype, device)
        try:
            r = bench(fn, *case.args, bytes_moved=case.bytes_moved, flops=case.flops, label=cand.name,
                      reference=floor_call(op), **case.kwargs)
        except BenchRefused as exc:
            c.state, c.why, c.times_us = "refused", f"T={t}: {exc.kind}: {exc.detail}"[:300], {}
            return
        c.times_us[t] = r.median_us
    c.state = "timed"


def tune(row: str, *, tokens: Sequence[int] = DEFAULT_TOKENS, dtype: str = "bf16", device: Any = None,
         verify_dtypes: Sequence[str] | None = None, workers: int | None = None, replace: bool = False,
         limit: int | None = None, pin: bool = True, progress: Progress | None = None,
         confirm_seconds: float = CONFIRM_SECONDS) -> TuneResult:
    """Tune ``row`` over its declared search space on this device; pin the winner for this GPU kind.

    ``tokens`` are token counts of the op's bench case (element counts for an op that declares no
    ``token_numel``). Every candidate is compiled (``workers`` threads, default one per CPU core), verified in every dtype
    of the row (``verify_dtypes`` to narrow it), and, if it passed, timed at ``tokens`` (the op's bench
    case) in ``dtype``; the fastest geometric mean wins. The untuned row (the source's defaults) is timed
    beside them. The pin is written for (GPU kind, the code's digest); an earlier pin of the same code
    holds unless ``replace`` (so ranks that tune at once agree), and only a winner that interleaved pairs
    against the untuned row confirm (``confirm_seconds`` a token count) is pinned. ``limit`` takes the first
    candidates only; ``pin=False`` reports the winner and writes no table.
    """
    spec = _spec.get_row(row)
    space = _target_space(spec)
    decl = get_decl(spec.op)
    per_token = decl.token_numel or 1  # an op without a token shape (elementwise) is tuned at element counts
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type not in spec.devices:
        raise TuneError(f"tune({row!r}): the row runs on {', '.join(spec.devices)}, not {device.type}")
    if dtype not in spec.dtypes:
        raise TuneError(f"tune({row!r}): dtype {dtype!r} is not among its dtypes ({', '.join(spec.dtypes)})")
    tokens = tuple(int(t) for t in tokens)
    if not tokens or min(tokens) < 1:
        raise TuneError(f"tune({row!r}): tokens must be positive token counts, got {tokens!r}")
    if not confirm_seconds > 0:
        raise TuneError(f"tune({row!r}): confirm_seconds must be > 0, got {confirm_seconds!r}")
    configs = list(space.configs())
    if limit is not None:
        configs = configs[:limit]
    if not configs:
        raise TuneError(f"tune({row!r}): no candidate meets the space's 'where' ({space.where})")
    say = progress or (lambda stage, done, total: None)
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    candidates = [Candidate(i, c) for i, c in enumerate(configs)]
    untuned = Candidate(-1, {})

    dtypes = tuple(verify_dtypes) if verify_dtypes is not None else spec.dtypes
    registered: list[str] = []
    pool_rows: dict[int, KernelSpec] = {}
    try:
        # Compiling runs ahead in threads while this thread verifies, in order, each candidate as it is built:
        # the GPU sees one verify at a time, the CPU cores stay busy compiling.
        t0 = time.perf_counter()
        waited = 0.0
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            builds = [pool.submit(_build, c, spec) for c in candidates]
            for c, built in zip(candidates, builds):
                w0 = time.perf_counter()
                built.result()
                waited += time.perf_counter() - w0
                say("compile", c.index + 1, len(candidates))
                if c.state == "pending":
                    cand = _spec.register(_candidate_row(spec, c.index, c.config), replace=True)
                    registered.append(cand.name)
                    pool_rows[c.index] = cand
                    _verify(c, cand, dtypes, device)
                say("verify", c.index + 1, len(candidates))
        seconds["compile (waited for)"] = waited
        seconds["compile + verify"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        base = _spec.register(_candidate_row(spec, -1, {}) if isinstance(spec.target, JitRow)
                              else dataclasses.replace(spec, name=f"{spec.name}@untuned", tune_space=None),
                              replace=True)
        registered.append(base.name)
        _time(untuned, base, spec.op, dtype, tokens, device, per_token)
        for n, c in enumerate(candidates):
            if c.state == "pending":
                _time(c, pool_rows[c.index], spec.op, dtype, tokens, device, per_token)
            say("time", n + 1, len(candidates))
        seconds["time"] = time.perf_counter() - t0
        timed = [c for c in candidates if c.score_us is not None]
        winner = min(timed, key=lambda c: (c.score_us, c.index)) if timed else None
        confirmation, not_pinned = None, ""
        if winner is not None and pin:
            if untuned.score_us is None:
                not_pinned = f"the untuned row could not be timed ({untuned.why}), so nothing confirms the winner"
            else:
                t0 = time.perf_counter()
                confirmation = _confirm(base, pool_rows[winner.index], spec.op, dtype, tokens, per_token, device,
                                        confirm_seconds)
                seconds["confirm"] = time.perf_counter() - t0
                slower = [t for t, s in zip(tokens, confirmation.shapes) if s.verdict == paired_stats.SLOWER]
                if slower:
                    not_pinned = (f"slower than the untuned row at T={', '.join(map(str, slower))} in interleaved "
                                  "pairs: the row keeps its defaults")
                elif not beats(confirmation):
                    not_pinned = ("its lead over the untuned row is within the timing noise of interleaved pairs: "
                                  "the row keeps its defaults")
    finally:
        for name in registered:
            try:
                _spec.unregister(name)
            except RegistryError:
                pass
    held = None
    gpu = platform.device_label(device)
    if winner is not None and pin and not not_pinned:
        held = _pin(spec, winner, untuned, gpu, dtype, tokens, len(candidates), replace)
    seconds["total"] = time.perf_counter() - started
    return TuneResult(row, spec.op, gpu, dtype, tokens, space, candidates, untuned, winner, held, seconds,
                      confirmation, not_pinned)


def _pin(spec: KernelSpec, winner: Candidate, untuned: Candidate, gpu: str, dtype: str, tokens: Sequence[int],
         n: int, replace: bool) -> pins.Pin | None:
    """Pin the winner in the row's table (pins.table_path) and let dispatch see the row's new code; None where
    the row's code cannot be read to key a pin by (a function whose source is gone)."""
    target = spec.target
    if isinstance(target, JitRow):
        source, digest = target.source, target.untuned_digest()
    else:
        where = pins.python_digest(target, resolve_ref(target), spec.tune_space)
        source, digest = where if where is not None else (None, None)
    if digest is None:
        return None
    held = pins.pin(source, spec.op, spec.name, digest, gpu, winner.config, replace=replace,
                    tuned_us=winner.score_us, untuned_us=untuned.score_us, dtype=dtype, tokens=list(tokens),
                    candidates=n)
    if isinstance(target, JitRow):
        target.forget_build()
    if held.config == winner.config and winner.record is not None and winner.record.verified:
        _spec.update_golden(spec.name, winner.record)  # the row now runs the code that passed: its verdict
    else:
        _spec.touch()
    return held
