"""Golden verification: is a row right, and where exactly does it differ?

``verify(row)`` runs the row and its baseline row on the op's reference input
set (every dtype the row declares, sizes 1 / 4097 / large, the op's edge
shapes and values) next to a float64 oracle, and reports per dtype the
largest absolute and relative error, the worst elements and pass/fail. The
verdict is written into the registry, so a row that passes becomes eligible
for dispatch and one that fails stops being so.

Modules, one job each: this one runs the cases (the reference inputs, the
defect checks around each call, the side stream on CUDA, the child process
when a row may crash); rapid_llm.kernels.verification.comparison holds the
tolerance rule every case is judged by; rapid_llm.kernels.verification.report
the report's types and their table.

Results are compared through ``out=`` buffers filled with NaN beforehand (by
the op's reference ``call``), so a kernel that leaves ``out`` untouched, or
skips a tail, fails.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
import zlib
from typing import Any, Callable, Mapping, Sequence

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.opdecl import Reference
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.verification import comparison as _cmp
from rapid_llm.kernels.verification import defects as _defects
from rapid_llm.kernels.verification.defects import Defect
from rapid_llm.kernels.verification.report import NOT_COMPARED, DtypeResult, GoldenError, GoldenReport

__all__ = ["GoldenError", "get_reference", "reference_cases", "verify", "CPU_SIZES", "CUDA_SIZES"]

#: Default sizes: a single element, one past a 4096 block, and a large size. The
#: CPU set stays modest because Triton rows there run in its interpreter.
CPU_SIZES = (1, 4097, 65536)
CUDA_SIZES = (1, 4097, 1 << 24)

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


def _banded(args: tuple) -> tuple:
    """The arguments with each tensor inside read bands (rapid_llm.kernels.verification.defects.inside_bands): a
    read just past a tensor lands in memory that exists, so it shows as a wrong value (and is then named an
    out-of-bounds read) instead of faulting the device or reading whatever is next."""
    fill = _defects.READ_BAND_BYTES[0]
    return tuple(_defects.inside_bands(a, fill, fill) if isinstance(a, torch.Tensor) and a.numel()
                 and 0 not in a.stride() else a for a in args)


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


#: Causes that make a result wrong only because it was read too early: its other symptoms are not defects.
_TIMING_CAUSES = ("other_stream", "deferred_work")


def _causes(run: Callable, args: tuple, got: Any, exact: torch.Tensor, wrong: torch.Tensor | None,
            tdtype: torch.dtype, ref: Reference, device: torch.device, right: Callable[[Any], bool],
            values_wrong: bool, defects: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The defects of a wrong case, with its cause named where a check can tell it (rapid_llm.kernels.verification.defects):
    work on another stream or finishing after the return, then (for wrong values) a read out of bounds, flushed
    subnormals or a narrower type. ``right(result)`` says whether a result passes the case; ``wrong`` is the mask
    of ``got``'s elements outside the rule (None where the op's own ``compare`` mode judged it)."""
    symptom_gone = [d for d in defects if d[0] != "unwritten"]
    if device.type == "cuda":  # right when the device is idle, wrong on a busy stream?
        again = run(*args)
        torch.cuda.synchronize(device)
        if right(again):
            return symptom_gone + [("other_stream", "wrong when its inputs are produced on the current stream behind "
                                                    "a delay, right when run alone: its work is not on the current "
                                                    "stream")]
    later = _defects.read_later(got, device)  # the same result, read again once everything has finished
    if later is not None and right(later):
        return symptom_gone + [("deferred_work", "wrong when read as the call returned, right once all work had "
                                                 "finished: it writes its result after returning (a host thread, or "
                                                 "a stream the caller does not wait on)")]
    if not values_wrong:
        return defects
    reads = _defects.out_of_bounds_reads(run, args)
    if reads:
        return defects + [("out_of_bounds_read", m) for m in reads]
    if ref.compare is None and wrong is not None:
        flushed = _defects.flush_to_zero(got, exact, wrong, args)
        if flushed:
            return defects + [("flush_to_zero", flushed)]
        narrow = _defects.precision_loss(got, exact, wrong, tdtype)
        if narrow:
            return defects + [("precision_loss", narrow)]
    return defects


def _verify_dtype(row: KernelSpec, fn: Callable, base: KernelSpec, base_fn: Callable | None, ref: Reference,
                  dtype: str, device: torch.device, sizes: Sequence[int],
                  tolerance: float | Mapping[str, float] | None) -> DtypeResult:
    tdtype = platform.torch_dtype(dtype)
    call = ref.call or (lambda f, *a: f(*a))
    abs_tol = _cmp.abs_tolerance(tolerance, dtype)
    rule = _cmp.rule_text(ref, abs_tol)
    cases = reference_cases(row.op, tdtype, device, sizes)
    # More seeds of one size: a result must follow its input (and is run twice: determinism).
    trial_n = int(sizes[min(1, len(sizes) - 1)])
    seed = zlib.crc32(f"{row.op}|{tdtype}".encode())
    trials = [(f"numel={trial_n} seed {k}",
               get_reference(row.op).make_inputs((trial_n,), tdtype, device, torch.Generator().manual_seed(seed + k)))
              for k in (1, 2)]
    acc = _cmp.Accumulator()
    found: list[Defect] = []
    side_stream = device.type == "cuda"
    budget = _cmp.HISTOGRAM_SAMPLES // max(len(cases) + len(trials), 1)
    results: dict[str, tuple[Any, torch.Tensor]] = {}
    causes_sought = timing_cause = False
    for label, args in cases + trials:
        if not row.takes(_spec.layout_of(a for a in args if isinstance(a, torch.Tensor))):
            # Dispatch never sends this layout to the row (a row-strided case, a contiguous-only row): check
            # the row on what it would be given, the same values dense.
            args = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)
        args64 = _cmp.to64(args)
        exact = ref.oracle(*args64).to(torch.float64)
        args = _banded(args)
        magnitude = ref.magnitude(*args64).to(torch.float64) if ref.magnitude is not None else None
        try:
            got, defects_here = _run_checked(call, fn, args, device, side_stream)
        except Exception as exc:  # a row that crashes on a reference case fails that dtype, with the reason shown
            acc.error = f"{label}: {type(exc).__name__}: {exc}"
            break
        base_out = call(base_fn, *args) if base_fn is not None else None
        bad = _cmp.compare_case(acc, label, got, exact, base_out, tdtype, ref, abs_tol, budget, base.name != row.name,
                            magnitude, args)
        if bad and callable(getattr(ref.compare, "defects", None)):  # a mode that names its wrong elements' class
            defects_here += ref.compare.defects(got.to(torch.float64), exact, args)
        unwritten = _defects.unwritten_count(got, exact)
        if unwritten:
            defects_here.append(("unwritten", f"{unwritten} of {got.numel()} result elements still hold the poison "
                                              "pattern"))
        if (bad or unwritten) and not causes_sought:  # name the cause, not only its symptom (first wrong case)
            causes_sought = True

            def right(result: Any) -> bool:
                return _cmp.compare_case(_cmp.Accumulator(), label, result, exact, base_out, tdtype, ref, abs_tol, 1,
                                         base.name != row.name, magnitude, args) == 0 \
                    and not _defects.unwritten_count(result, exact)

            wrong = None
            if ref.compare is None and isinstance(got, torch.Tensor) and got.shape == exact.shape:
                errors, _ = _cmp.case_errors(got, exact.to(got.device), base_out, tdtype, ref, abs_tol,
                                             base.name != row.name, magnitude)
                wrong = errors.diff > errors.allowed
            defects_here = _causes(lambda *a: call(fn, *a), args, got, exact, wrong, tdtype, ref, device,
                                   right, bool(bad), defects_here)
            timing_cause = any(kind in _TIMING_CAUSES for kind, _ in defects_here)
        elif timing_cause:  # the same cause again: its symptom is not another defect
            defects_here = [d for d in defects_here if d[0] != "unwritten"]
        found += [Defect(kind, dtype, label, message) for kind, message in defects_here]
        results[label] = (got, exact)
    deterministic = None
    if acc.error is None and not timing_cause:  # results read before the work ended say nothing about their input
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
            again, _ = _run_checked(call, fn, _banded(dict(cases)[label]), device, side_stream)
            deterministic = isinstance(got0, torch.Tensor) and _defects.same_bits(got0, again)
    if acc.error is not None:
        return DtypeResult(dtype, False, math.inf, math.inf, None, acc.base_err, acc.n, acc.bad, tuple(acc.worst),
                           rule, acc.error, defects=tuple(found))
    sample = torch.cat(acc.samples) if acc.samples else torch.zeros(0, dtype=torch.float64)
    return DtypeResult(dtype, acc.bad == 0 and not found, acc.max_abs, acc.max_rel, acc.vs_base, acc.base_err, acc.n,
                       acc.bad, tuple(acc.worst), rule, None, sample, tuple(found), deterministic,
                       ref.compare.summary(acc.counts) if ref.compare is not None else (), acc.ulps, acc.bound_ulps)


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
    findings, notes, adopted = (), [], None
    if sanitize or isolate or (dev.type == "cuda" and _should_isolate(row, isolate)):
        from rapid_llm.kernels.verification import isolate as _isolate

        from rapid_llm.kernels.toolchain.jit_row import JitRow
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
                said = f": {first.message}" if first.status == "failed" and first.message else ""
                notes.append(f"first run in a child process: {first.status} ({first.times_text()}){said}")
                _ISOLATED.add(_isolation_key(row))
                if (first.status == "passed" and first.verified is not None and tolerance is None
                        and first.verified.device == str(dev)):  # the same checks on the same build: not run twice
                    adopted = first.verified
            if sanitize:
                tools = _isolate.SANITIZER_TOOLS if sanitize is True else tuple(sanitize)
                started = time.perf_counter()
                runs = _isolate.sanitize(job, tools, dtypes=dtypes[:1] if dtypes else row.dtypes[:1])
                findings = tuple(f for r in runs.values() for f in r.findings)
                notes.append("compute-sanitizer: " + "; ".join(
                    f"{tool} {r.status}" + (f" ({r.message})" if r.status in ("unavailable", "crashed", "hung") else "")
                    for tool, r in runs.items()) + f" ({time.perf_counter() - started:.2f} s)")
            if adopted is not None:
                notes.append("checks: the child's (the same build, dtypes and sizes), not run again here")
                record_ = dataclasses.replace(adopted.record, verified=adopted.passed and not findings)
                return _finish(row, dataclasses.replace(adopted, record=record_, findings=findings,
                                                        notes=tuple(notes)), record)
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
    passed = all(r.passed for r in results) and not findings  # what GoldenReport.passed says
    per_dtype = tuple((r.dtype, r.recorded_diff) for r in results)
    golden = GoldenRecord(verified=passed, max_abs_diff=max(d for _, d in per_dtype), baseline=base.name,
                          per_dtype=per_dtype)
    return _finish(row, GoldenReport(row.name, row.op, base.name, str(dev), results, golden, findings, tuple(notes)),
                   record)


def _finish(row: KernelSpec, report: GoldenReport, record: bool) -> GoldenReport:
    """Record the verdict (with ``record``) and return the report."""
    if record:
        updated = _spec.update_golden(row.name, report.record)
        digest = getattr(row.target, "digest", None)  # a %%cuda_jit row: remembered across kernel restarts
        if report.passed and digest and not updated.golden.refused:  # a refused build stays refused
            from rapid_llm.kernels.verification.remembered import remember_verification

            remember_verification(digest, report.record, row.op)
    return report


#: Rows whose checks already ran in a child process here (by source digest, or name).
_ISOLATED: set[str] = set()


def _isolation_key(row: KernelSpec) -> str:
    return getattr(row.target, "digest", None) or getattr(row.target, "built_digest", None) or row.name


def _should_isolate(row: KernelSpec, isolate: bool | None) -> bool:
    if isolate is not None:
        return isolate
    from rapid_llm.kernels.toolchain.jit_row import JitRow

    return (isinstance(row.target, JitRow) and os.environ.get("RAPID_LLM_ISOLATE", "1") != "0"
            and _isolation_key(row) not in _ISOLATED)


def _not_run(row: KernelSpec, base: KernelSpec, dev: torch.device, dtypes: Sequence[str] | None,
             message: str) -> GoldenReport:
    """The report of a row whose checks could not start (its child could not set it up): failed, the one
    line saying why, and the row's record left as it was (nothing was learned about the kernel)."""
    dtypes = tuple(dtypes) if dtypes else row.dtypes
    results = tuple(DtypeResult(d, False, math.inf, math.inf, None, None, 0, 0, (), NOT_COMPARED + "the checks "
                                "did not run", message) for d in dtypes)
    return GoldenReport(row.name, row.op, base.name, str(dev), results, row.golden, notes=(message,))


def _broken(row: KernelSpec, base: KernelSpec, dev: torch.device, dtypes: Sequence[str] | None, message: str,
            record: bool) -> GoldenReport:
    """The report of a row that crashed or hung its child: failed, with the device's message, recorded broken."""
    dtypes = tuple(dtypes) if dtypes else row.dtypes
    results = tuple(DtypeResult(d, False, math.inf, math.inf, None, None, 0, 0, (), NOT_COMPARED + "the row "
                                "crashed or hung", message) for d in dtypes)
    golden = GoldenRecord(verified=False, max_abs_diff=None, baseline=base.name)
    if record:
        _spec.update_golden(row.name, golden)
    return GoldenReport(row.name, row.op, base.name, str(dev), results, golden,
                        notes=(f"broken: {message}", "this process was not touched: its CUDA context and tensors "
                               "are as they were"))
