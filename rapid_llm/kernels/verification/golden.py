"""Golden verification: is a row right, and where exactly does it differ?

``verify(row)`` runs the row and its baseline row on the op's reference input
set (every dtype the row declares, sizes 1 / 4097 / large, the op's edge
shapes and values) next to a float64 oracle, and reports per dtype the
largest absolute and relative error, the worst elements and pass/fail. The
verdict is written into the registry, so a row that passes becomes eligible
for dispatch and one that fails stops being so.

The tolerance rule, per element ``i`` (``eps`` and ``tiny`` of the row's dtype)::

    allowed_i = max(k * |baseline_i - exact_i|,  ulps * eps * m_i + tiny)

A row passes a dtype when ``|row_i - exact_i| <= allowed_i`` for every
element. ``m_i`` is ``|exact_i|``, or the larger of it and the op's declared
``magnitude`` where cancellation makes the result smaller than what was
rounded on the way (a rotation's ``|x cos| + |y sin|``). The second term admits any result within ``ulps`` units of
relative precision of the exact answer (default 2: one correct rounding is
half of one, and computing in fp32 before rounding to a half type adds a
little); ``tiny`` lets subnormal results flush to zero. The first term
lets an op whose floor is itself approximate (a reduction, say) set its own
bar: a row may be ``k`` (default 2) times as far off as the baseline at
that element. Comparing element by element, rather than maxima, is what
stops large values from hiding a wrong small one. An explicit ``tolerance``
replaces the rule with an absolute bound per dtype. An op whose result this
rule cannot judge (fp8 values and their scales; special values such as an
infinite LSE) gives its Reference a ``compare`` mode, which replaces the rule
and adds its own lines to the report (rapid_llm.kernels.verification.compare_modes).

Results are compared through ``out=`` buffers filled with NaN beforehand (by
the op's reference ``call``), so a kernel that leaves ``out`` untouched, or
skips a tail, fails; NaN in a result counts as an infinite error unless the
exact answer is NaN too.
"""
from __future__ import annotations

import math
import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from rapid_llm.kernels.verification import defects as _defects
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.verification.defects import Defect
from rapid_llm.kernels.registry.opdecl import Reference
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

__all__ = [
    "Defect",
    "GoldenError",
    "Reference",
    "ElementDiff",
    "DtypeResult",
    "GoldenReport",
    "get_reference",
    "reference_cases",
    "verify",
    "CPU_SIZES",
    "CUDA_SIZES",
]

#: Default sizes: a single element, one past a 4096 block, and a large size. The
#: CPU set stays modest because Triton rows there run in its interpreter.
CPU_SIZES = (1, 4097, 65536)
CUDA_SIZES = (1, 4097, 1 << 24)
#: How the rule of a dtype that was never compared starts (the rest says why).
_NOT_COMPARED = "not compared: "
#: Worst elements kept per dtype, and how many |diff| values feed the histogram.
TOP_K = 5
HISTOGRAM_SAMPLES = 200_000


class GoldenError(RuntimeError):
    """Verification cannot run (no reference for the op, or the row cannot run here)."""


def get_reference(op: str) -> Reference:
    """The reference an op declared (rapid_llm.kernels.declare_op)."""
    try:
        return _spec.get_decl(op).reference
    except _spec.RegistryError as exc:
        raise GoldenError(f"op {op!r} has no golden reference: {exc}") from None


def reference_cases(op: str, dtype: torch.dtype, device: torch.device,
                    sizes: Sequence[int]) -> list[tuple[str, tuple]]:
    """The labelled input sets a row of ``op`` is checked on; deterministic per (op, dtype)."""
    ref = get_reference(op)
    gen = torch.Generator().manual_seed(zlib.crc32(f"{op}|{dtype}".encode()))
    cases = [(f"numel={n}", ref.make_inputs((int(n),), dtype, device, gen)) for n in sizes]
    if ref.edge_cases is not None:
        cases.extend(ref.edge_cases(dtype, device, gen))
    return cases


# ------------------------------------------------------------------ report


@dataclass(frozen=True)
class ElementDiff:
    """One element where a row and the exact answer differ: where, by how much, and the values."""

    case: str
    index: tuple[int, ...]
    row_value: float
    exact_value: float
    baseline_value: float | None
    abs_diff: float
    allowed: float

    @property
    def ratio(self) -> float:
        """How many times the allowed error this element is off (> 1 fails)."""
        if self.abs_diff == 0:
            return 0.0
        return math.inf if self.allowed == 0 else self.abs_diff / self.allowed


@dataclass(frozen=True)
class DtypeResult:
    """The verdict for one dtype over every reference case."""

    dtype: str
    passed: bool
    max_abs_diff: float
    max_rel_diff: float
    max_abs_diff_vs_baseline: float | None
    baseline_max_abs_diff: float | None
    n_elements: int
    n_bad: int
    worst: tuple[ElementDiff, ...]
    rule: str
    error: str | None = None
    diff_sample: torch.Tensor | None = field(default=None, repr=False, compare=False)
    defects: tuple[Defect, ...] = ()
    deterministic: bool | None = None  # bitwise equal over two runs on one input (None: not run)
    notes: tuple[str, ...] = ()  # what an op's own comparison rule reports (Reference.compare.summary)

    @property
    def worst_element(self) -> ElementDiff | None:
        return self.worst[0] if self.worst else None

    def failure_reasons(self) -> list[str]:
        """Why this dtype failed, in the row itself: a defect fails it with 0 bad elements, and its
        line below the table is easy to miss."""
        if self.passed:
            return []
        reasons = []
        if self.error is not None:
            reasons.append(self.rule.removeprefix(_NOT_COMPARED) if self.rule.startswith(_NOT_COMPARED) else "error")
        if self.n_bad:
            reasons.append(f"{self.n_bad} bad element{'' if self.n_bad == 1 else 's'}")
        reasons += dict.fromkeys(d.kind for d in self.defects)
        return reasons

    @property
    def verdict(self) -> str:
        """"pass", or "FAIL: " and the reasons ("FAIL: guard_band", "FAIL: 3 bad elements")."""
        if self.passed:
            return "pass"
        reasons = self.failure_reasons()
        return "FAIL: " + ", ".join(reasons) if reasons else "FAIL"

    def cells(self) -> tuple[str, ...]:
        """This dtype's row of the report table (COLUMNS): the text and the HTML forms share it."""
        w = self.worst_element
        worst = self.error or ("-" if w is None else
                               f"{w.case} {list(w.index)}: row {w.row_value:.6g}, exact {w.exact_value:.6g}")
        of_allowed = "-" if w is None else ("inf" if math.isinf(w.ratio) else f"{w.ratio:.2g}x")
        return (self.dtype, self.verdict, _fmt(self.max_abs_diff), _fmt(self.max_rel_diff),
                of_allowed, _fmt(self.max_abs_diff_vs_baseline), _fmt(self.baseline_max_abs_diff),
                f"{self.n_bad}/{self.n_elements}", worst)

    @property
    def recorded_diff(self) -> float:
        """What the GoldenRecord keeps: the diff against the baseline row (against exact without one)."""
        return self.max_abs_diff if self.max_abs_diff_vs_baseline is None else self.max_abs_diff_vs_baseline


@dataclass(frozen=True)
class GoldenReport:
    """Verification of one row; prints as a table (the notebook extension renders the golden widget)."""

    row: str
    op: str
    baseline: str
    device: str
    results: tuple[DtypeResult, ...]
    record: GoldenRecord
    findings: tuple[Any, ...] = ()  # compute-sanitizer reports (rapid_llm.kernels.verification.isolate.SanitizerFinding)
    notes: tuple[str, ...] = ()     # how the checks ran: in a child process, under which sanitizer tools

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results) and not self.findings

    @property
    def defects(self) -> tuple[Defect, ...]:
        """Every defect found, over all dtypes (rapid_llm.kernels.verification.defects.DEFECT_KINDS says what each kind is)."""
        return tuple(d for r in self.results for d in r.defects)

    def defect_lines(self) -> list[str]:
        """One line per defect, then whether the row is deterministic: what the table does not show."""
        lines = [f"defect {d}" for d in self.defects] + [f"sanitizer {f}" for f in self.findings] + list(self.notes)
        lines += [f"{r.dtype}: {note}" for r in self.results for note in r.notes]
        runs = {r.dtype: r.deterministic for r in self.results if r.deterministic is not None}
        if runs:
            same = [d for d, v in runs.items() if v]
            differ = [d for d, v in runs.items() if not v]
            lines.append("deterministic (two runs, bitwise): " + ("yes" if not differ else
                         f"no for {', '.join(differ)}" + (f"; yes for {', '.join(same)}" if same else "")))
        return lines

    def __getitem__(self, dtype: str) -> DtypeResult:
        for r in self.results:
            if r.dtype == dtype:
                return r
        raise KeyError(f"{self.row}: no result for dtype {dtype!r} (have {', '.join(r.dtype for r in self.results)})")

    def regressions(self, record: GoldenRecord) -> list[str]:
        """Dtypes whose measured diff against the baseline exceeds what ``record`` promises.

        A shipped row's test calls this with the row's committed record: the
        test fails when the kernel got less accurate than it claimed.
        """
        promised = dict(record.per_dtype)
        out = []
        for r in self.results:
            limit = promised.get(r.dtype, record.max_abs_diff)
            if limit is None:
                continue
            if not r.passed or not r.recorded_diff <= limit:
                out.append(f"{r.dtype}: measured {r.recorded_diff:.3g} vs recorded {limit:.3g}"
                           + ("" if r.passed else " (and it fails the tolerance)"))
        return out

    def _header(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        if not self.passed and all(r.passed for r in self.results):  # no row says why: the sanitizer did
            verdict += f": {len(self.findings)} sanitizer finding{'' if len(self.findings) == 1 else 's'}"
        return f"golden {self.row} vs {self.baseline} and the float64 oracle on {self.device}: {verdict}"

    def rule_text(self) -> str:
        """What the tolerance is relative to (the table's "of allowed" is the worst element's error over it)."""
        return "rule: " + "; ".join(sorted({r.rule for r in self.results}))

    def __str__(self) -> str:
        lines = [self._header()]
        rows = [COLUMNS] + [r.cells() for r in self.results]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
        for row in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
        lines.append(self.rule_text())
        lines.extend(self.defect_lines())
        return "\n".join(line.rstrip() for line in lines)

    def __repr__(self) -> str:
        return str(self)


#: The report's columns: "of allowed" is the worst element's error over what the rule allows it (<= 1 passes).
COLUMNS = ("dtype", "verdict", "max abs", "max rel", "of allowed", "vs baseline", "baseline err", "bad/elements",
           "worst element")


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) or abs(x) >= 1e300 else f"{x:.3g}"


# ---------------------------------------------------------------- comparison


def _abs_diff(got: torch.Tensor, want: torch.Tensor, want_rounded: torch.Tensor) -> torch.Tensor:
    """|got - want| in float64; agreeing infinities and NaNs count as exact, any other NaN as infinite."""
    d = (got - want).abs()
    agree = (torch.isinf(want_rounded) & (got == want_rounded)) | (torch.isnan(got) & torch.isnan(want))
    d = torch.where(agree, torch.zeros_like(d), d)
    return torch.where(torch.isnan(d), torch.full_like(d, math.inf), d)


def _to64(args: tuple) -> tuple:
    return tuple(a.to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


@dataclass
class _Acc:
    """Running reduction over one dtype's cases."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    vs_base: float | None = None
    base_err: float | None = None
    n: int = 0
    bad: int = 0
    worst: list[ElementDiff] = field(default_factory=list)
    samples: list[torch.Tensor] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # kept by an op's own comparison rule
    error: str | None = None


def _compare_case(acc: _Acc, label: str, got: torch.Tensor, exact: torch.Tensor, base: torch.Tensor | None,
                  dtype: torch.dtype, ref: Reference, abs_tol: float | None, budget: int, base_sets_bar: bool,
                  magnitude: torch.Tensor | None = None, args: tuple = ()) -> int:
    if got.shape != exact.shape:
        raise GoldenError(f"case {label}: row returned shape {tuple(got.shape)}, expected {tuple(exact.shape)}")
    scale = exact.abs() if magnitude is None else torch.maximum(exact.abs(), magnitude.to(exact.device))
    info = torch.finfo(dtype)
    got64 = got.to(torch.float64)
    exact_rounded = exact.to(dtype).to(torch.float64)
    d = _abs_diff(got64, exact, exact_rounded)
    if ref.compare is not None:  # the op's own rule (verification.compare_modes): quantised values, special values
        d, allowed, scale = ref.compare.errors(got64, exact, args, acc.counts)
        base_sets_bar = False
    elif abs_tol is not None:
        allowed = torch.full_like(d, abs_tol)
    else:
        allowed = ref.ulps * info.eps * scale.nan_to_num(posinf=0.0) + info.tiny
    base64 = None
    if base is not None:
        base64 = base.to(torch.float64)
        base_err = _abs_diff(base64, exact, exact_rounded)
        if abs_tol is None and base_sets_bar:  # where the baseline is infinitely off it sets no bar
            finite_err = torch.where(torch.isfinite(base_err), base_err, torch.zeros_like(base_err))
            allowed = torch.maximum(allowed, ref.baseline_factor * finite_err)
        acc.base_err = max(acc.base_err or 0.0, float(base_err.max()))
        acc.vs_base = max(acc.vs_base or 0.0, float(_abs_diff(got64, base64, base64).max()))
    rel = (d / scale.clamp_min(info.tiny).nan_to_num(nan=info.tiny)).nan_to_num(nan=math.inf)
    ratio = torch.where(d == 0, torch.zeros_like(d), d / allowed)
    acc.max_abs = max(acc.max_abs, float(d.max()))
    acc.max_rel = max(acc.max_rel, float(rel.max()))
    acc.n += d.numel()
    bad = int((d > allowed).sum())
    acc.bad += bad
    flat = ratio.flatten()
    top = torch.topk(flat, min(TOP_K, flat.numel())).indices.tolist()
    for i in top:
        idx = tuple(int(j) for j in torch.unravel_index(torch.tensor(i), d.shape)) if d.dim() else ()
        acc.worst.append(ElementDiff(label, idx, got64.flatten()[i].item(), exact.flatten()[i].item(),
                                     None if base64 is None else base64.flatten()[i].item(),
                                     d.flatten()[i].item(), allowed.flatten()[i].item()))
    acc.worst.sort(key=lambda e: (-e.ratio, -e.abs_diff))
    del acc.worst[TOP_K:]
    step = max(1, d.numel() // max(budget, 1))
    acc.samples.append(d.flatten()[::step].to("cpu", torch.float64))
    return bad


def _pick_device(row: KernelSpec, device: Any) -> torch.device:
    if device is None:
        cuda = torch.cuda.is_available()
        device = "cuda" if cuda and "cuda" in row.devices else ("cpu" if "cpu" in row.devices else "cuda")
    device = torch.device(device)
    if device.type not in row.devices:
        raise GoldenError(f"cannot verify {row.name} on {device.type}: it runs on {', '.join(row.devices)} only")
    avail = row.probe(device)
    if not avail:
        raise GoldenError(
            f"cannot verify {row.name} on {device.type}: {avail.reason or 'its toolchain probe says no'}; "
            "the row stays as it was (unverified rows are not dispatched)"
        )
    return device


def _baseline(row: KernelSpec) -> KernelSpec:
    if row.golden.baseline:
        return _spec.get_row(row.golden.baseline)
    native = [r for r in _spec.rows_for(row.op) if r.is_native]
    if not native:
        raise GoldenError(f"op {row.op!r} has no native row to verify {row.name} against")
    return native[0]


def _abs_tolerance(tolerance: float | Mapping[str, float] | None, dtype: str) -> float | None:
    if tolerance is None:
        return None
    if isinstance(tolerance, Mapping):
        value = tolerance.get(dtype)
    else:
        value = tolerance
    if value is not None and not value >= 0:
        raise GoldenError(f"tolerance for {dtype} must be >= 0, got {value!r}")
    return None if value is None else float(value)


def _tensor_bytes(args: Sequence[Any]) -> int:
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def _run_on_side_stream(call: Callable, fn: Callable, args: tuple, device: torch.device) -> tuple[Any, tuple]:
    """Run ``call(fn, *args)`` on a fresh current stream whose inputs are produced there behind a delay;
    read the result after synchronising that stream only (see rapid_llm.kernels.verification.defects)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        torch.cuda._sleep(_defects.SIDE_STREAM_DELAY_CYCLES)
        ran = tuple(_defects.copy_for_row(a, f"argument {i + 1}")
                    if isinstance(a, torch.Tensor) and 0 not in a.stride() else a for i, a in enumerate(args))
        got = call(fn, *ran)
    stream.synchronize()
    return got, ran


def _run_checked(call: Callable, fn: Callable, args: tuple, device: torch.device,
                 side_stream: bool) -> tuple[Any, list[tuple[str, str]]]:
    """One call of a row with the defect checks around it: (result, [(kind, message), ...])."""
    before = _defects.snapshot(args)
    _defects.poison_free_memory(_tensor_bytes(args), device)
    with _defects.guarded() as guards:
        if side_stream:
            got, ran = _run_on_side_stream(call, fn, args, device)
        else:
            got, ran = call(fn, *args), args
        found = [("guard_band", m) for m in _defects.guard_band_defects(guards)]
    found += [("mutated_input", m) for m in _defects.changed_arguments(before, ran)]
    return got, found


def _verify_dtype(row: KernelSpec, fn: Callable, base: KernelSpec, base_fn: Callable | None, ref: Reference,
                  dtype: str, device: torch.device, sizes: Sequence[int],
                  tolerance: float | Mapping[str, float] | None) -> DtypeResult:
    tdtype = platform.torch_dtype(dtype)
    call = ref.call or (lambda f, *a: f(*a))
    abs_tol = _abs_tolerance(tolerance, dtype)
    rule = (ref.compare.rule if ref.compare is not None else f"|diff| <= {abs_tol:g}" if abs_tol is not None else
            f"|diff| <= max({ref.baseline_factor:g} x baseline error, {ref.ulps:g} eps m + tiny) per element, "
            f"m = {'|exact|' if ref.magnitude is None else 'max(|exact|, the op magnitude)'}")
    cases = reference_cases(row.op, tdtype, device, sizes)
    # More seeds of one size: a result must follow its input (and is run twice: determinism).
    trial_n = int(sizes[min(1, len(sizes) - 1)])
    seed = zlib.crc32(f"{row.op}|{tdtype}".encode())
    trials = [(f"numel={trial_n} seed {k}",
               get_reference(row.op).make_inputs((trial_n,), tdtype, device, torch.Generator().manual_seed(seed + k)))
              for k in (1, 2)]
    acc = _Acc()
    found: list[Defect] = []
    side_stream = device.type == "cuda"
    budget = HISTOGRAM_SAMPLES // max(len(cases) + len(trials), 1)
    results: dict[str, tuple[Any, torch.Tensor]] = {}
    for label, args in cases + trials:
        if not row.takes(_spec.layout_of(a for a in args if isinstance(a, torch.Tensor))):
            # Dispatch never sends this layout to the row (a row-strided case, a contiguous-only row): check
            # the row on what it would be given, the same values dense.
            args = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)
        args64 = _to64(args)
        exact = ref.oracle(*args64).to(torch.float64)
        magnitude = ref.magnitude(*args64).to(torch.float64) if ref.magnitude is not None else None
        try:
            got, defects_here = _run_checked(call, fn, args, device, side_stream)
        except Exception as exc:  # a row that crashes on a reference case fails that dtype, with the reason shown
            acc.error = f"{label}: {type(exc).__name__}: {exc}"
            break
        base_out = call(base_fn, *args) if base_fn is not None else None
        bad = _compare_case(acc, label, got, exact, base_out, tdtype, ref, abs_tol, budget, base.name != row.name,
                            magnitude, args)
        unwritten = _defects.unwritten_count(got, exact)
        if unwritten:
            defects_here.append(("unwritten", f"{unwritten} of {got.numel()} result elements still hold the poison "
                                              "pattern"))
        if (bad or unwritten) and side_stream:  # right when the device is idle, wrong on a busy stream?
            again = call(fn, *args)
            torch.cuda.synchronize(device)
            if _compare_case(_Acc(), label, again, exact, base_out, tdtype, ref, abs_tol, 1, base.name != row.name,
                             magnitude, args) == 0 and not _defects.unwritten_count(again, exact):
                # the cause, not its symptom: the result was read before the row's work on another stream ended
                defects_here = [d for d in defects_here if d[0] != "unwritten"]
                defects_here.append(("other_stream", "wrong when its inputs are produced on the current stream "
                                                     "behind a delay, right when run alone: its work is not on the "
                                                     "current stream"))
        found += [Defect(kind, dtype, label, message) for kind, message in defects_here]
        results[label] = (got, exact)
    deterministic = None
    if acc.error is None:
        label = f"numel={trial_n}"
        if label in results:
            got0, exact0 = results[label]
            for k in (1, 2):
                got_k, exact_k = results[f"{label} seed {k}"]
                if (isinstance(got0, torch.Tensor) and _defects.same_bits(got0, got_k)
                        and not torch.equal(exact0.nan_to_num(), exact_k.nan_to_num())):
                    found.append(Defect("input_independent", dtype, f"{label} seed {k}",
                                        "the same output bits for different inputs (and different exact answers)"))
                    break
            again, _ = _run_checked(call, fn, dict(cases)[label], device, side_stream)
            deterministic = isinstance(got0, torch.Tensor) and _defects.same_bits(got0, again)
    if acc.error is not None:
        return DtypeResult(dtype, False, math.inf, math.inf, None, acc.base_err, acc.n, acc.bad, tuple(acc.worst),
                           rule, acc.error, defects=tuple(found))
    sample = torch.cat(acc.samples) if acc.samples else torch.zeros(0, dtype=torch.float64)
    return DtypeResult(dtype, acc.bad == 0 and not found, acc.max_abs, acc.max_rel, acc.vs_base, acc.base_err, acc.n,
                       acc.bad, tuple(acc.worst), rule, None, sample, tuple(found), deterministic,
                       ref.compare.summary(acc.counts) if ref.compare is not None else ())


def verify(row_name: str, *, tolerance: float | Mapping[str, float] | None = None,
           sizes: Sequence[int] | None = None, dtypes: Sequence[str] | None = None,
           device: torch.device | str | None = None, record: bool = True, isolate: bool | None = None,
           sanitize: bool | Sequence[str] = False) -> GoldenReport:
    """Check ``row_name`` against its baseline row and the float64 oracle; record the verdict.

    Runs on CUDA when the row supports it and a device is visible, else on
    CPU (Triton rows there need ``TRITON_INTERPRET=1``). A row that cannot
    run here raises :class:`GoldenError` saying why and is left untouched.
    ``tolerance`` (a float, or dtype -> float) replaces the default rule
    with an absolute bound. With ``record`` the registry gets a new
    GoldenRecord: ``verified`` is the verdict, the diffs are against the
    baseline row. The native floor is its own baseline: it runs twice, so its
    record says whether it is deterministic, and only the oracle sets its bar.

    ``isolate`` (default: for a CUDA row of JIT code not yet verified in this
    process) first runs the checks in a child process, so a crash or a hang
    marks the row broken instead of taking this process down;
    ``sanitize=True`` also runs them under compute-sanitizer's four tools, or
    under the ones named (``sanitize=("racecheck",)``; rapid_llm.kernels.verification.isolate).
    """
    row = _spec.get_row(row_name)
    ref = get_reference(row.op)
    dev = _pick_device(row, device)
    base = _baseline(row)
    findings, notes = (), []
    if sanitize or isolate or (dev.type == "cuda" and _should_isolate(row, isolate)):
        from rapid_llm.kernels.verification import isolate as _isolate

        from rapid_llm.kernels.build.jit_row import JitRow
        from rapid_llm.kernels.registry.opsource import ExportError

        try:
            job = _isolate.recipe(row)
        except ExportError as exc:
            job, cannot = None, str(exc)
        else:
            cannot = "a child process cannot rebuild this row (defined in this process)"
        if job is None and isinstance(row.target, JitRow) and (isolate or _should_isolate(row, isolate)):
            return _not_run(row, base, dev, dtypes, f"not verified: {cannot}; verify({row.name!r}, isolate=False) "
                            "runs it in this process, where a crash would take the notebook's CUDA context down")
        if job is None:
            notes.append(f"not isolated: {cannot}")
        else:
            if isolate or _should_isolate(row, isolate):
                first = _isolate.run_child(job, dtypes=dtypes, sizes=sizes)
                if first.broken:
                    return _broken(row, base, dev, dtypes, first.message, record)
                if first.status == "not_set_up":
                    return _not_run(row, base, dev, dtypes, first.message)
                notes.append(f"first run in a child process: {first.status}")
                _ISOLATED.add(_isolation_key(row))
            if sanitize:
                tools = _isolate.SANITIZER_TOOLS if sanitize is True else tuple(sanitize)
                runs = _isolate.sanitize(job, tools, dtypes=dtypes[:1] if dtypes else row.dtypes[:1])
                findings = tuple(f for r in runs.values() for f in r.findings)
                notes.append("compute-sanitizer: " + "; ".join(
                    f"{tool} {r.status}" + (f" ({r.message})" if r.status in ("unavailable", "crashed", "hung") else "")
                    for tool, r in runs.items()))
    fn = row.load()
    base_fn = base.load()  # for the floor itself: a second run, so the record checks determinism
    if dtypes is None:
        dtypes = row.dtypes
    unknown = [d for d in dtypes if d not in row.dtypes]
    if unknown:
        raise GoldenError(f"{row.name}: dtype {unknown[0]!r} is not among its dtypes ({', '.join(row.dtypes)})")
    sizes = tuple(sizes) if sizes is not None else (CUDA_SIZES if dev.type == "cuda" else CPU_SIZES)
    if not sizes or any(int(n) < 1 for n in sizes):
        raise GoldenError(f"{row.name}: sizes must be positive element counts, got {sizes!r}")
    results = tuple(
        _verify_dtype(row, fn, base, base_fn if d in base.dtypes else None, ref, d, dev, sizes, tolerance)
        for d in dtypes
    )
    passed = all(r.passed for r in results)
    per_dtype = tuple((r.dtype, r.recorded_diff) for r in results)
    golden = GoldenRecord(verified=passed, max_abs_diff=max(d for _, d in per_dtype), baseline=base.name,
                          per_dtype=per_dtype)
    if record:
        _spec.update_golden(row.name, golden)
        digest = getattr(row.target, "digest", None)  # a %%cuda_jit row: remembered across kernel restarts
        if passed and digest:
            from rapid_llm.kernels.build.jit_row import remember_verification

            remember_verification(digest, golden)
    return GoldenReport(row.name, row.op, base.name, str(dev), results, golden, findings, tuple(notes))


#: Rows whose checks already ran in a child process here (by source digest, or name).
_ISOLATED: set[str] = set()


def _isolation_key(row: KernelSpec) -> str:
    return getattr(row.target, "digest", None) or getattr(row.target, "built_digest", None) or row.name


def _should_isolate(row: KernelSpec, isolate: bool | None) -> bool:
    if isolate is not None:
        return isolate
    from rapid_llm.kernels.build.jit_row import JitRow

    return (isinstance(row.target, JitRow) and os.environ.get("RAPID_LLM_ISOLATE", "1") != "0"
            and _isolation_key(row) not in _ISOLATED)


def _not_run(row: KernelSpec, base: KernelSpec, dev: torch.device, dtypes: Sequence[str] | None,
             message: str) -> GoldenReport:
    """The report of a row whose checks could not start (its child could not set it up): failed, the one
    line saying why, and the row's record left as it was (nothing was learned about the kernel)."""
    dtypes = tuple(dtypes) if dtypes else row.dtypes
    results = tuple(DtypeResult(d, False, math.inf, math.inf, None, None, 0, 0, (), "not compared: the checks "
                                "did not run", message) for d in dtypes)
    return GoldenReport(row.name, row.op, base.name, str(dev), results, row.golden, notes=(message,))


def _broken(row: KernelSpec, base: KernelSpec, dev: torch.device, dtypes: Sequence[str] | None, message: str,
            record: bool) -> GoldenReport:
    """The report of a row that crashed or hung its child: failed, with the device's message, recorded broken."""
    dtypes = tuple(dtypes) if dtypes else row.dtypes
    results = tuple(DtypeResult(d, False, math.inf, math.inf, None, None, 0, 0, (), "not compared: the row "
                                "crashed or hung", message) for d in dtypes)
    golden = GoldenRecord(verified=False, max_abs_diff=None, baseline=base.name)
    if record:
        _spec.update_golden(row.name, golden)
    return GoldenReport(row.name, row.op, base.name, str(dev), results, golden,
                        notes=(f"broken: {message}", "this process was not touched: its CUDA context and tensors "
                               "are as they were"))
